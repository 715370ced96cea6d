"""A PNG heatmap of an inspection: layers x prompt positions, with the window, page boundaries and the ``--find``
texts' occurrences marked (a frame over every layer and a triangle above it, one colour per text, named in a legend).

Each cell is the share of KV heads that kept the position (or one head's kept/not kept with ``head``), or with
``scores=True`` the policy's pooled score, divided by the layer and head's largest score outside the window and
shown on a log scale (grey: the layer was not scored). Long prompts are averaged into at most ``MAX_COLUMNS``
columns. matplotlib is imported here, lazily, and drawn with the Agg canvas (no display, no pyplot state).
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np

from ..answering.inspection import Inspection, Occurrence
from ..output_files import atomic_output

MAX_COLUMNS = 2400
FOUND_COLOURS = ("#00a651", "#00b4d8", "#b5179e", "#8ac926")  # one per --find text, in turn
SCORE_FLOOR = 1e-3  # relative scores below this share the darkest colour


def cell_values(inspection: Inspection, *, scores: bool = False, head: int | None = None) -> np.ndarray:
    """(layers, prompt_length) values of the heatmap (NaN: not scored)."""
    heads = slice(None) if head is None else [head]
    if not scores:
        return inspection.kept[:, heads].mean(axis=1)
    values = inspection.scores[:, heads].astype(np.float64)  # (layers, heads, positions)
    values[~np.isfinite(values)] = np.nan
    window_start = inspection.window[0]
    reference = values[..., :window_start] if window_start > 0 else values
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        peak = np.nanmax(reference, axis=-1, keepdims=True)  # NaN for an unscored layer
        peak[~(peak > 0)] = np.nan
        relative = np.clip(values / peak, SCORE_FLOOR, 1.0)  # NaN stays NaN
        return np.nanmean(relative, axis=1)


def binned(values: np.ndarray, columns: int = MAX_COLUMNS) -> np.ndarray:
    """Average (rows, positions) into at most ``columns`` equal bins along positions (NaN-aware)."""
    length = values.shape[1]
    if length <= columns:
        return values
    width = math.ceil(length / columns)
    padded = np.full((values.shape[0], width * math.ceil(length / width)), np.nan)
    padded[:, :length] = values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(padded.reshape(values.shape[0], -1, width), axis=2)


def draw(inspection: Inspection, *, scores: bool = False, head: int | None = None,
         found: tuple[list[Occurrence], ...] = ()):
    """The matplotlib Figure (Agg canvas); ``found``: each ``--find`` text's occurrences, marked."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.figure import Figure

    inspection.check_selection(head=head)
    values = cell_values(inspection, scores=scores, head=head)
    length, rows = inspection.length, len(inspection.layers)
    image = binned(values)
    figure = Figure(figsize=(13, max(3.6, 0.16 * rows + 2.4)), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    cmap = matplotlib.colormaps["magma" if scores else "YlOrRd"].with_extremes(bad="#c9ccd1")
    norm = LogNorm(SCORE_FLOOR, 1.0) if scores else Normalize(0.0, 1.0)
    shown = axes.imshow(np.ma.masked_invalid(image), aspect="auto", interpolation="nearest", cmap=cmap, norm=norm,
                        extent=(0, length, rows - 0.5, -0.5))
    settings = inspection.report.settings
    who = f"KV head {head}" if head is not None else f"share of {inspection.num_heads} KV heads"
    what = "pooled score / its maximum before the window (log)" if scores else f"kept ({who})"
    figure.colorbar(shown, ax=axes, pad=0.01, fraction=0.03, label=what)
    axes.set_title(f"{inspection.report.model} · {inspection.report.method} · budget "
                   f"{settings.max_capacity_prompt} of {length} tokens · window {settings.window_size}"
                   + (f" · {who}" if scores and head is not None else ""), fontsize=11, loc="left")
    axes.set_xlabel("prompt position")
    axes.set_ylabel("layer")
    step = max(1, math.ceil(rows / 16))
    ticks = list(range(0, rows, step))
    axes.set_yticks(ticks, [str(inspection.layers[t]) for t in ticks])
    axes.set_xlim(0, length)

    # the observation window: a blue frame over every layer
    start, end = inspection.window
    axes.axvspan(start, end, facecolor="none", edgecolor="#2a4fd6", linewidth=1.6, hatch="///", alpha=0.9)
    axes.annotate("window", xy=(start, -0.5), xytext=(0, 4), textcoords="offset points", ha="right", va="bottom",
                  color="#2a4fd6", fontsize=8, annotation_clip=False)
    # page boundaries, and the document's span
    runs = inspection.page_runs()
    pages = len({page for page, _, _ in runs}) > 1
    top = axes.secondary_xaxis("top")
    labels, positions = [], []
    for index, (page, first, last) in enumerate(runs):
        if index:
            axes.axvline(first, color="#1f6f43", linewidth=0.9, linestyle="--")
        if pages:
            positions.append((first + last) / 2)
            labels.append(f"p{page}")
    document_start, document_end = inspection.prompt.document_span
    for edge in (document_start, document_end):
        if 0 < edge < length:
            axes.axvline(edge, color="#444", linewidth=0.8, linestyle=":")
    top.set_xticks(positions, labels, fontsize=8)
    top.tick_params(length=0)
    mark_found(axes, found, rows)
    return figure


def mark_found(axes, found: tuple[list[Occurrence], ...], rows: int) -> None:
    """Frame each occurrence of each searched text over every layer, with a triangle above it (visible even when the
    occurrence is narrower than a pixel), in the text's colour; a legend names the texts."""
    from matplotlib.lines import Line2D

    handles = []
    for index, occurrences in enumerate(occurrence_list for occurrence_list in found if occurrence_list):
        colour = FOUND_COLOURS[index % len(FOUND_COLOURS)]
        for occurrence in occurrences:
            axes.axvspan(occurrence.start, occurrence.end, facecolor="none", edgecolor=colour, linewidth=1.3)
            axes.plot((occurrence.start + occurrence.end) / 2, -0.5, marker="v", markersize=7, color=colour,
                      clip_on=False, linestyle="none")
        count = len(occurrences)
        handles.append(Line2D([], [], marker="v", color=colour, linestyle="none",
                              label=f"--find {occurrences[0].text!r} ({count} occurrence{'s' if count > 1 else ''})"))
    if handles:
        axes.legend(handles=handles, loc="lower left", fontsize=8, framealpha=0.85)


def write_heatmap(inspection: Inspection, path: str | os.PathLike, *, scores: bool = False,
                  head: int | None = None, found: tuple[list[Occurrence], ...] = ()) -> None:
    """Draw and save the PNG to ``path`` atomically (a partial image is never left behind)."""
    figure = draw(inspection, scores=scores, head=head, found=found)
    with atomic_output(path, binary=True) as file:
        figure.savefig(file, format="png")
