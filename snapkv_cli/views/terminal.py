"""The terminal view of an inspection (Rich): prompt tokens shaded by how many (layer, KV head) pairs kept them.

By default: a summary table of kept share per page or paragraph, the most-kept passages and the observation window,
which stays readable on an 80-column terminal for long documents; ``full=True`` shades the whole prompt.
"""

from __future__ import annotations

import math

import numpy as np
from rich import box
from rich.console import Console, Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..inspection import Inspection, Occurrence

# background intensity by kept share: level 0 (kept by none) is unshaded, levels 1-5 split (0, 1] in fifths
LEVEL_STYLES = [
    Style(),
    Style(color="black", bgcolor="#fff3c4"),
    Style(color="black", bgcolor="#ffdc73"),
    Style(color="black", bgcolor="#ffb140"),
    Style(color="black", bgcolor="#f57a2e"),
    Style(color="white", bgcolor="#c8261c", bold=True),
]
KEPT_STYLE = LEVEL_STYLES[-1]  # what a single (layer, head) kept, when --layer and --head are both given
WINDOW_STYLE = Style(color="white", bgcolor="#2a4fd6", bold=True, underline=True)
PASSAGES = 5
PASSAGE_TOKENS = 60
OCCURRENCES_SHOWN = 10  # per searched text; --json has all
_EIGHTHS = " ▏▎▍▌▋▊▉█"


def level(share: float) -> int:
    """0 for a token no selected pair kept, else 1-5 by fifths of the share."""
    return 0 if share <= 0 else min(5, max(1, math.ceil(share * 5 - 1e-9)))


def bar(share: float, width: int = 16) -> str:
    eighths = round(max(0.0, min(1.0, share)) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[rest] if rest else "")).ljust(width)


def shaded_text(inspection: Inspection, share: np.ndarray, start: int, end: int) -> Text:
    """Tokens [start, end) with a background by kept share; the observation window in its own style."""
    text = Text()
    window_start = inspection.window[0]
    for position in range(start, end):
        token = inspection.tokens[position]
        if token:
            style = WINDOW_STYLE if position >= window_start else LEVEL_STYLES[level(float(share[position]))]
            text.append(token, style)
    return text


def legend(inspection: Inspection, layer: int | None, head: int | None) -> Text:
    text = Text()
    text.append("Legend: ", style="bold")
    if layer is not None and head is not None:
        text.append(" kept ", KEPT_STYLE)
        text.append(" not kept ")
    else:
        text.append(" none ")
        for number in range(1, 6):
            text.append(f" ≤{number * 20}% ", LEVEL_STYLES[number])
    text.append("  ")
    text.append(" window ", WINDOW_STYLE)
    text.append(f"\nShading: {inspection.describe_selection(layer, head)}", style="dim")
    return text


def header(inspection: Inspection) -> Text:
    report = inspection.report
    settings, prompt, cache = report.settings, report.prompt, report.cache
    start, end = inspection.window
    text = Text()
    text.append("snapkv inspect", style="bold")
    text.append(f"  {report.model} · {report.method} · budget {settings.max_capacity_prompt} · "
                f"window {end - start}\n")
    text.append(f"prompt {report.prompt_tokens} tokens = {prompt.document} document + "
                f"{prompt.template} template + {prompt.question} question\n")
    text.append(f"KV cache {cache.tokens_before} → {cache.tokens_after:g} tokens per head "
                f"({cache.compression_ratio:.2f}x) over {len(inspection.layers)} layers x "
                f"{inspection.num_heads} KV heads")
    return text


def summary_table(inspection: Inspection, share: np.ndarray) -> Table:
    pages = len({page for page, _, _ in inspection.page_runs()}) > 1
    table = Table(title=f"Kept share by {'page' if pages else 'paragraph'}", title_justify="left",
                  box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column("part", no_wrap=True)
    table.add_column("positions", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("kept", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for segment in inspection.segments():
        value = float(share[segment.start:segment.end].mean()) if segment.length else 0.0
        table.add_row(segment.label, f"{segment.start}-{segment.end}", str(segment.length), f"{value:.0%}",
                      Text(bar(value), style="#f57a2e"))
    return table


def _pages_label(inspection: Inspection, start: int, end: int) -> str:
    pages = sorted({page for page in inspection.prompt.token_pages[start:end] if page is not None})
    if not pages:
        return ""
    return f" · page {pages[0]}" if len(pages) == 1 else f" · pages {pages[0]}-{pages[-1]}"


def passages(inspection: Inspection, share: np.ndarray) -> list[RenderableType]:
    found = inspection.top_passages(share, PASSAGES, PASSAGE_TOKENS)
    if not found:
        return []
    parts: list[RenderableType] = [Text(f"Most-kept passages ({PASSAGE_TOKENS} tokens)", style="bold")]
    for rank, passage in enumerate(found, 1):
        parts.append(Text(f"#{rank}  positions {passage.start}-{passage.end}"
                          f"{_pages_label(inspection, passage.start, passage.end)} · {passage.share:.0%} kept",
                          style="bold cyan"))
        body = Text()
        body.append("…", style="dim")
        body.append_text(shaded_text(inspection, share, passage.start, passage.end))
        body.append("…", style="dim")
        parts.append(body)
        parts.append(Text())
    return parts


def window_section(inspection: Inspection, share: np.ndarray) -> list[RenderableType]:
    start, end = inspection.window
    return [Text(f"Observation window (positions {start}-{end}, always kept)", style="bold"),
            shaded_text(inspection, share, start, end)]


def _where(inspection: Inspection, occurrence: Occurrence) -> str:
    if inspection.in_window(occurrence.start):
        return " · observation window, always kept"
    question_start, question_end = inspection.prompt.question_span
    if question_start <= occurrence.start < question_end:
        return " · question"
    return _pages_label(inspection, occurrence.start, occurrence.end) or " · template"


def found_section(inspection: Inspection, occurrences: list[Occurrence]) -> list[RenderableType]:
    """Each occurrence of a searched text (``--find``): how many (layer, KV head) pairs kept it whole, in part or
    not at all, then each layer's KV heads' count of its tokens kept."""
    parts: list[RenderableType] = []
    for occurrence in occurrences[:OCCURRENCES_SHOWN]:
        whole, part, none = occurrence.heads()
        where = _where(inspection, occurrence)
        parts.append(Text())
        parts.append(Text(f"Found {occurrence.text!r} at positions {occurrence.start}-{occurrence.end}{where}: kept "
                          f"whole by {whole} of {occurrence.kept_per_head.size} (layer, KV head) pairs, in part by "
                          f"{part}, not at all by {none}", style="bold"))
        separator = "" if occurrence.length < 10 else ","  # one digit per head while counts are single digits
        counts = [f"{layer}:{separator.join(str(count) for count in row)}"
                  for layer, row in zip(inspection.layers, occurrence.kept_per_head.tolist())]
        parts.append(Text(f"Its {occurrence.length} tokens kept by each KV head, layer:heads  " + " ".join(counts),
                          style="dim"))
    if len(occurrences) > OCCURRENCES_SHOWN:
        parts.append(Text(f"... and {len(occurrences) - OCCURRENCES_SHOWN} more occurrences of "
                          f"{occurrences[0].text!r} (--json lists them all)", style="dim"))
    return parts


def build_view(inspection: Inspection, *, layer: int | None = None, head: int | None = None,
               full: bool = False, found: tuple[list[Occurrence], ...] = ()) -> Group:
    """The renderables of the view; ``layer``/``head`` narrow the pairs shaded (not those ``found`` counts: each
    searched text's occurrences, shown last)."""
    share = inspection.kept_share(layer, head)
    parts: list[RenderableType] = [header(inspection), Text(), legend(inspection, layer, head), Text()]
    if full:
        parts += [shaded_text(inspection, share, 0, inspection.length), Text(), summary_table(inspection, share)]
    else:
        parts += [summary_table(inspection, share), *passages(inspection, share), *window_section(inspection, share)]
    for occurrences in found:
        parts += found_section(inspection, occurrences)
    return Group(*parts)


def render(inspection: Inspection, console: Console, *, layer: int | None = None, head: int | None = None,
           full: bool = False, page: bool | None = None, found: tuple[list[Occurrence], ...] = ()) -> None:
    """Print the view; the full text goes through the pager when ``page`` (default: stdout is a terminal)."""
    view = build_view(inspection, layer=layer, head=head, full=full, found=found)
    if page is None:
        page = full and console.file.isatty()
    if page:
        with console.pager(styles=True):
            console.print(view)
    else:
        console.print(view)
