"""The terminal view of an inspection (Rich): prompt tokens shaded by how many (layer, KV head) pairs kept them.

By default: a summary table of kept share per page or paragraph, the most-kept passages and the observation window,
which stays readable on an 80-column terminal for long documents; ``full=True`` shades the whole prompt. Without
colour (output to a file or a pipe, ``NO_COLOR``) the levels are written as marks around the text instead,
``⟦3 kept text⟧``, explained by the legend the view prints.
"""

from __future__ import annotations

import math

import numpy as np
from rich import box
from rich.console import Console, Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..answering.inspection import Inspection, Occurrence

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
# without colour: a run of tokens of one level is written ⟦<mark> text⟧; level 0 (kept by none) is left unmarked
MARK_OPEN, MARK_CLOSE = "⟦", "⟧"
WINDOW_MARK = "W"
KEPT_MARK = "K"  # what a single (layer, head) kept, when --layer and --head are both given


def level(share: float) -> int:
    """0 for a token no selected pair kept, else 1-5 by fifths of the share."""
    return 0 if share <= 0 else min(5, max(1, math.ceil(share * 5 - 1e-9)))


def bar(share: float, width: int = 16) -> str:
    eighths = round(max(0.0, min(1.0, share)) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[rest] if rest else "")).ljust(width)


def level_mark(level_: int, one_pair: bool = False) -> str | None:
    """The mark of a level without colour: None for 0 (kept by none), else the level's digit (``K`` when one
    (layer, head) pair is shown: kept or not)."""
    if level_ == 0:
        return None
    return KEPT_MARK if one_pair else str(level_)


def shaded_text(inspection: Inspection, share: np.ndarray, start: int, end: int, *, plain: bool = False,
                one_pair: bool = False) -> Text:
    """Tokens [start, end) with a background by kept share; the observation window in its own style. ``plain``:
    no colour, each run of tokens of one level marked ``⟦<mark> text⟧`` instead (:func:`level_mark`)."""
    text = Text()
    window_start = inspection.window[0]
    if not plain:
        for position in range(start, end):
            token = inspection.tokens[position]
            if token:
                style = WINDOW_STYLE if position >= window_start else LEVEL_STYLES[level(float(share[position]))]
                text.append(token, style)
        return text
    runs: list[tuple[str | None, list[str]]] = []
    for position in range(start, end):
        mark = WINDOW_MARK if position >= window_start else level_mark(level(float(share[position])), one_pair)
        if not runs or runs[-1][0] != mark:
            runs.append((mark, []))
        runs[-1][1].append(inspection.tokens[position])
    for mark, tokens in runs:
        body = "".join(tokens)
        if mark is None or not body.strip():
            text.append(body)
            continue
        core = body.strip()
        lead, trail = body[:len(body) - len(body.lstrip())], body[len(body.rstrip()):]
        text.append(f"{lead}{MARK_OPEN}{mark} {core}{MARK_CLOSE}{trail}")
    return text


def legend(inspection: Inspection, layer: int | None, head: int | None, *, plain: bool = False) -> Text:
    text = Text()
    text.append("Legend: ", style="bold")
    one_pair = layer is not None and head is not None
    if plain:
        if one_pair:
            text.append(f"{MARK_OPEN}{KEPT_MARK} text{MARK_CLOSE} kept; unmarked text: not kept")
        else:
            marks = " ".join(f"{MARK_OPEN}{number} …{MARK_CLOSE}" for number in range(1, 6))
            shares = ", ".join(f"≤{number * 20}%" for number in range(1, 6))
            text.append(f"{marks} kept by {shares} of the pairs; unmarked text: kept by none")
        text.append(f"; {MARK_OPEN}{WINDOW_MARK} text{MARK_CLOSE} the observation window (always kept)")
    elif one_pair:
        text.append(" kept ", KEPT_STYLE)
        text.append(" not kept ")
    else:
        text.append(" none ")
        for number in range(1, 6):
            text.append(f" ≤{number * 20}% ", LEVEL_STYLES[number])
    if not plain:
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
        value = float(share[segment.start:segment.end].mean())  # a segment holds at least one token
        table.add_row(segment.label, f"{segment.start}-{segment.end}", str(segment.length), f"{value:.0%}",
                      Text(bar(value), style="#f57a2e"))
    return table


def _pages_label(inspection: Inspection, start: int, end: int) -> str:
    pages = sorted({page for page in inspection.prompt.token_pages[start:end] if page is not None})
    if not pages:
        return ""
    return f" · page {pages[0]}" if len(pages) == 1 else f" · pages {pages[0]}-{pages[-1]}"


def passages(inspection: Inspection, share: np.ndarray, **marks) -> list[RenderableType]:
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
        body.append_text(shaded_text(inspection, share, passage.start, passage.end, **marks))
        body.append("…", style="dim")
        parts.append(body)
        parts.append(Text())
    return parts


def window_section(inspection: Inspection, share: np.ndarray, **marks) -> list[RenderableType]:
    start, end = inspection.window
    return [Text(f"Observation window (positions {start}-{end}, always kept)", style="bold"),
            shaded_text(inspection, share, start, end, **marks)]


def _where(inspection: Inspection, occurrence: Occurrence) -> str:
    if inspection.in_window(occurrence.start):
        return " · observation window, always kept"
    question_start, question_end = inspection.prompt.question_span
    if question_start <= occurrence.start < question_end:
        return " · question"
    return _pages_label(inspection, occurrence.start, occurrence.end) or " · template"


def found_section(inspection: Inspection, occurrences: list[Occurrence]) -> list[RenderableType]:
    """Each occurrence of a searched text (``--find``): how many (layer, KV head) pairs kept it whole, in part or
    not at all, then a table of the same layer by layer, with each KV head's count of its tokens kept."""
    parts: list[RenderableType] = []
    for occurrence in occurrences[:OCCURRENCES_SHOWN]:
        whole, part, none = occurrence.heads()
        where = _where(inspection, occurrence)
        parts.append(Text())
        parts.append(Text(f"Found {occurrence.text!r} at positions {occurrence.start}-{occurrence.end}{where}: kept "
                          f"whole by {whole} of {occurrence.kept_per_head.size} (layer, KV head) pairs, in part by "
                          f"{part}, not at all by {none}", style="bold"))
        length = occurrence.length
        parts.append(Text(f"Layer by layer: how many of its {inspection.num_heads} KV heads kept all {length} tokens, "
                          f"some, none; then each head's count of the {length} it kept (head 0 first)", style="dim"))
        parts.append(found_table(inspection, occurrence))
    if len(occurrences) > OCCURRENCES_SHOWN:
        parts.append(Text(f"... and {len(occurrences) - OCCURRENCES_SHOWN} more occurrences of "
                          f"{occurrences[0].text!r} (--json lists them all)", style="dim"))
    return parts


def found_table(inspection: Inspection, occurrence: Occurrence) -> Table:
    """Layer by layer (consecutive layers that kept the same are one row): how many of the layer's KV heads kept
    all of the occurrence's tokens, some, none, and how many tokens each head kept."""
    length = occurrence.length
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for name in ("layers", "all", "some", "none"):
        table.add_column(name, justify="left" if name == "layers" else "right", no_wrap=True)
    table.add_column("tokens kept, head by head")
    rows: list[tuple[list[int], list[int]]] = []  # (layers, per-head counts)
    for layer, counts in zip(inspection.layers, occurrence.kept_per_head.tolist()):
        if rows and rows[-1][1] == counts and rows[-1][0][-1] == layer - 1:
            rows[-1][0].append(layer)
        else:
            rows.append(([layer], counts))
    for layers, counts in rows:
        label = str(layers[0]) if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"
        kept_all = sum(count == length for count in counts)
        kept_none = sum(count == 0 for count in counts)
        table.add_row(label, str(kept_all), str(len(counts) - kept_all - kept_none), str(kept_none),
                      " ".join(str(count) for count in counts))
    return table


def build_view(inspection: Inspection, *, layer: int | None = None, head: int | None = None,
               full: bool = False, found: tuple[list[Occurrence], ...] = (), plain: bool = False) -> Group:
    """The renderables of the view; ``layer``/``head`` narrow the pairs shaded (not those ``found`` counts: each
    searched text's occurrences, shown last); ``plain``: levels as marks for output without colour."""
    share = inspection.kept_share(layer, head)
    marks = {"plain": plain, "one_pair": layer is not None and head is not None}
    parts: list[RenderableType] = [header(inspection), Text(), legend(inspection, layer, head, plain=plain), Text()]
    if full:
        parts += [shaded_text(inspection, share, 0, inspection.length, **marks), Text(),
                  summary_table(inspection, share)]
    else:
        parts += [summary_table(inspection, share), *passages(inspection, share, **marks),
                  *window_section(inspection, share, **marks)]
    for occurrences in found:
        parts += found_section(inspection, occurrences)
    return Group(*parts)


def has_colour(console: Console) -> bool:
    """Whether ``console`` shows backgrounds: not when it writes to a file or a pipe, nor under ``NO_COLOR``."""
    return console.color_system is not None and not console.no_color


def render(inspection: Inspection, console: Console, *, layer: int | None = None, head: int | None = None,
           full: bool = False, page: bool | None = None, found: tuple[list[Occurrence], ...] = ()) -> None:
    """Print the view (levels as marks when ``console`` has no colour); the full text goes through the pager when
    ``page`` (default: stdout is a terminal)."""
    view = build_view(inspection, layer=layer, head=head, full=full, found=found, plain=not has_colour(console))
    if page is None:
        page = full and console.file.isatty()
    if page:
        with console.pager(styles=True):
            console.print(view)
    else:
        console.print(view)
