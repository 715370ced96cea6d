"""Needle In A Haystack results: a table (Rich or Markdown) and the paper-style heatmap PNG."""

from __future__ import annotations

from typing import BinaryIO

from .niah import NiahCell, NiahOutcome, summarize_niah


def _label(method: str, budget: int | None) -> str:
    return method if budget is None else f"{method} {budget}"


def _ordered(cells: list[NiahCell]) -> list[NiahCell]:
    return sorted(cells, key=lambda c: (c.method != "full", c.method, c.budget or 0))


def niah_rows(outcomes: list[NiahOutcome]) -> tuple[list[str], list[list[str]]]:
    """One row per method and budget: exact hits over the depths of each length, then exact and partial overall."""
    cells = summarize_niah(outcomes)
    lengths = sorted({c.length for c in cells})
    by_key = {(c.method, c.budget, c.length): c for c in cells}
    header = ["method", "budget", *[f"{length} tok" for length in lengths], "exact", "partial"]
    rows = []
    for total in _ordered(summarize_niah(outcomes, pooled=True)):
        per_length = []
        for length in lengths:
            cell = by_key.get((total.method, total.budget, length))
            per_length.append("-" if cell is None else f"{cell.exact}/{cell.total}")
        rows.append([total.method, "-" if total.budget is None else str(total.budget), *per_length,
                     f"{total.exact_rate:.0%}", f"{total.partial:.2f}"])
    return header, rows


def niah_heatmap(outcomes: list[NiahOutcome], file: BinaryIO, *, score: str = "partial",
                 panels: list[tuple[str, int | None]] | None = None, title: str | None = None) -> None:
    """Context length (x) by needle depth (y, 0% at the top) coloured by ``score`` (partial or exact, 0 red to 1
    green), one panel per method and budget side by side (``panels`` picks and orders them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    lengths = sorted({o.length for o in outcomes})
    depths = sorted({o.depth for o in outcomes})
    pooled = {(c.method, c.budget): c for c in summarize_niah(outcomes, pooled=True)}
    if panels is None:
        panels = [(c.method, c.budget) for c in _ordered(list(pooled.values()))]
    values = {(o.method, o.budget, o.length, o.depth): float(o.partial if score == "partial" else o.exact)
              for o in outcomes}
    width = max(2.6, 0.5 * len(lengths) + 1.4)
    figure, axes = plt.subplots(1, len(panels), figsize=(width * len(panels) + 1.0, 0.32 * len(depths) + 1.9),
                                squeeze=False, sharey=True)
    image = None
    for axis, (method, budget) in zip(axes[0], panels):
        grid = np.full((len(depths), len(lengths)), np.nan)
        for row, depth in enumerate(depths):
            for column, length in enumerate(lengths):
                grid[row, column] = values.get((method, budget, length, depth), np.nan)
        image = axis.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
        axis.set_xticks(range(len(lengths)), [f"{length // 1024}k" if length % 1024 == 0 else str(length)
                                              for length in lengths])
        axis.set_yticks(range(len(depths)), [f"{depth:g}%" for depth in depths])
        axis.set_xticks(np.arange(-0.5, len(lengths)), minor=True)
        axis.set_yticks(np.arange(-0.5, len(depths)), minor=True)
        axis.grid(which="minor", color="white", linewidth=1.0)
        axis.tick_params(which="minor", length=0)
        cell = pooled.get((method, budget))
        summary = "" if cell is None else f"\nexact {cell.exact_rate:.0%} · partial {cell.partial:.2f}"
        axis.set_title(_label(method, budget) + summary, fontsize=9)
        axis.set_xlabel("context length (tokens)")
    axes[0][0].set_ylabel("needle depth")
    if image is not None:
        figure.colorbar(image, ax=axes[0].tolist(), fraction=0.025, pad=0.02,
                        label="partial score" if score == "partial" else "exact (0/1)")
    if title:
        figure.suptitle(title, fontsize=10, y=1.08)
    figure.savefig(file, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
