"""One self-contained HTML file of an inspection: no network, inline CSS and JS, the data embedded as JSON.

The page's script draws every prompt token as a span shaded by how many of the selected (layer, KV head) pairs kept
it, with layer and head selectors ("all" aggregates); hovering or clicking a token shows its position, page, kept
count and pooled score. The report numbers (``ask``'s report minus the answer) are rendered as static tables.
Kept positions travel as base64 bit masks and scores as base64 float16 (float32 when a score exceeds float16), so
a long document stays a small file.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
from collections.abc import Iterator
from importlib import resources

import numpy as np

from ..answering.inspection import Inspection
from ..output_files import atomic_output
from .units import human_bytes

_MARKER = re.compile(r"<!--snapkv:(\w+)-->")
_FLOAT16_MAX = float(np.finfo(np.float16).max)


def template() -> str:
    return (resources.files("snapkv_cli.views") / "inspect.html").read_text(encoding="utf-8")


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(array.tobytes()).decode("ascii")


def page_data(inspection: Inspection, *, layer: int | None = None, head: int | None = None) -> dict:
    """What the page's script reads: tokens, spans, pages and, per layer and KV head, kept bits and scores."""
    layers = []
    for row, number in enumerate(inspection.layers):
        entry: dict = {"layer": number, "scored": inspection.scored[row],
                       "kept": [_b64(np.packbits(inspection.kept[row, h], bitorder="little"))
                                for h in range(inspection.num_heads)],
                       "scores": None}
        if inspection.scored[row]:
            scores = inspection.scores[row]
            finite = scores[np.isfinite(scores)]
            wide = finite.size and float(np.abs(finite).max()) > _FLOAT16_MAX
            dtype = "<f4" if wide else "<f2"
            entry["scores_dtype"] = "f4" if wide else "f2"
            entry["scores"] = [_b64(scores[h].astype(dtype)) for h in range(inspection.num_heads)]
        layers.append(entry)
    return {
        "tokens": inspection.tokens,
        "pages": [list(run) for run in inspection.page_runs()],
        "window": list(inspection.window),
        "question_span": list(inspection.prompt.question_span),
        "document_span": list(inspection.prompt.document_span),
        "heads": inspection.num_heads,
        "layers": layers,
        "initial": {"layer": "all" if layer is None else layer, "head": "all" if head is None else head},
        "report": inspection.report.to_json(answer=False),
    }


def script_json(value) -> str:
    """JSON that is safe inside a <script> element (no "</script>", no comment openers)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") \
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _cell(key: str, value) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif value is None:
        text = "–"
    else:
        text = str(value)
    if "bytes" in key.split("_") and _numeric(value):  # peak_rss_bytes, bytes_before, a doc cache's bytes...
        text = f"{value} ({human_bytes(value)})"
    return html.escape(text)


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _key_value_table(title: str, values: dict) -> str:
    rows = "".join(f"<tr><th>{html.escape(str(key))}</th><td class=\"{'n' if _numeric(value) else ''}\">"
                   f"{_cell(str(key), value)}</td></tr>" for key, value in values.items())
    return f"<section><h2>{html.escape(title)}</h2><table>{rows}</table></section>\n"


def _rows_table(title: str, rows: list[dict]) -> str:
    if not rows:
        return ""
    columns = list(rows[0])
    head = "".join(f"<th class=\"n\">{html.escape(column)}</th>" for column in columns)
    body = "".join("<tr>" + "".join(f"<td class=\"n\">{_cell(column, row.get(column))}</td>" for column in columns)
                   + "</tr>" for row in rows)
    return (f"<section><h2>{html.escape(title)}</h2><div class=\"scroll\"><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div></section>\n")


def report_html(report: dict) -> str:
    """``ask``'s report (minus the answer) as tables: the run, each nested object, the layer and page rows."""
    scalars = {key: value for key, value in report.items() if not isinstance(value, (dict, list))}
    parts = [_key_value_table("Run", scalars)]
    for key, value in report.items():
        if isinstance(value, dict):
            parts.append(_key_value_table(key.capitalize(), value))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            parts.append(_rows_table(key.capitalize(), value))
    return "".join(parts)


def summary_html(inspection: Inspection) -> str:
    share = inspection.kept_share()
    pages = len({page for page, _, _ in inspection.page_runs()}) > 1
    rows = []
    for segment in inspection.segments():
        value = float(share[segment.start:segment.end].mean())  # a segment holds at least one token
        rows.append(f"<tr><td>{html.escape(segment.label)}</td><td class=\"n\">{segment.start}-{segment.end}</td>"
                    f"<td class=\"n\">{value:.0%}</td><td><span class=\"bar\" style=\"width:{value * 100:.1f}px\">"
                    f"</span></td></tr>")
    return (f"<section><h2>Kept share by {'page' if pages else 'paragraph'} (all layers and heads)</h2>"
            f"<table><thead><tr><th>part</th><th class=\"n\">positions</th><th class=\"n\">kept</th><th></th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table></section>\n")


def header_html(inspection: Inspection) -> str:
    report = inspection.report
    settings, cache = report.settings, report.cache
    meta = (f"{report.document} · {report.model} · {report.method} · budget "
            f"{settings.max_capacity_prompt} · window {settings.window_size} · {report.prompt_tokens} "
            f"prompt tokens · KV cache {cache.tokens_before} → {cache.tokens_after:g} tokens per head "
            f"({cache.compression_ratio:.2f}x)")
    parts = ["<h1>snapkv inspect</h1>"]
    if report.question:
        parts.append(f"<p class=\"question\">Q: {html.escape(report.question)}</p>")
    if inspection.answer is not None:
        parts.append(f"<p class=\"question\">A: {html.escape(inspection.answer)}</p>")
    parts.append(f"<p class=\"meta\">{html.escape(meta)}</p>")
    return "\n".join(parts)


def render_chunks(inspection: Inspection, *, layer: int | None = None, head: int | None = None) -> Iterator[str]:
    """The page, piece by piece: the template's text with each ``<!--snapkv:NAME-->`` marker filled in."""
    fillers = {
        "title": lambda: html.escape(f"snapkv inspect · {inspection.report.question}"),
        "header": lambda: header_html(inspection),
        "summary": lambda: summary_html(inspection),
        "report": lambda: report_html(inspection.report.to_json(answer=False)),
        "data": lambda: script_json(page_data(inspection, layer=layer, head=head)),
    }
    text = template()
    position = 0
    for match in _MARKER.finditer(text):
        yield text[position:match.start()]
        yield fillers[match.group(1)]()
        position = match.end()
    yield text[position:]


def write_html(inspection: Inspection, path: str | os.PathLike, *, layer: int | None = None,
               head: int | None = None) -> None:
    """Write the page to ``path`` atomically (a partial page is never left behind)."""
    with atomic_output(path) as file:
        for chunk in render_chunks(inspection, layer=layer, head=head):
            file.write(chunk)
