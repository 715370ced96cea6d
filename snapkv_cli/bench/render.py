"""Benchmark results as a Rich table, Markdown and a PNG plot."""

from __future__ import annotations

from typing import BinaryIO

from rich.table import Table

from .accuracy import Cell, overall, summarize
from .speed import SpeedRow


def _budget(budget: int | None) -> str:
    return "-" if budget is None else str(budget)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _ordered(cells: list[Cell]) -> list[Cell]:
    return sorted(cells, key=lambda c: (c.method != "full", c.method, c.budget or 0))


def accuracy_rows(outcomes) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per (task, method, budget), one accuracy column per length, then retention."""
    cells = summarize(outcomes)
    lengths = sorted({c.length for c in cells})
    header = ["task", "method", "budget", *[f"{length} tok" for length in lengths], "retention"]
    by_key = {(c.task, c.method, c.budget, c.length): c for c in cells}
    rows = []
    for task in dict.fromkeys(c.task for c in cells):
        pooled = overall([c for c in cells if c.task == task])
        for total in _ordered(pooled):
            accuracies = []
            for length in lengths:
                cell = by_key.get((task, total.method, total.budget, length))
                accuracies.append("-" if cell is None else f"{cell.accuracy:.0%} ({cell.correct}/{cell.total})")
            rows.append([task, total.method, _budget(total.budget), *accuracies, _percent(total.retention)])
    return header, rows


def speed_rows(rows: list[SpeedRow]) -> tuple[list[str], list[list[str]]]:
    header = ["prompt", "method", "budget", "prefill s", "selection s", "decode tok/s", "KV MB", "peak RSS MB"]
    return header, [[str(r.length), r.method, _budget(r.budget), f"{r.prefill_s:.2f}", f"{r.selection_s:.3f}",
                     f"{r.decode_tokens_per_s:.1f}",
                     f"{r.kv_bytes / 2**20:.1f}", f"{r.peak_rss_bytes / 2**20:.0f}"] for r in rows]


def rich_table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for name in header:
        table.add_column(name, justify="left" if name in ("task", "method") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def accuracy_plot(outcomes, file: BinaryIO) -> None:
    """Accuracy vs budget per method (full cache as a dashed line), one panel per prompt length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = summarize(outcomes)
    lengths = sorted({c.length for c in cells})
    figure, axes = plt.subplots(1, len(lengths), figsize=(4.2 * len(lengths), 3.6), squeeze=False, sharey=True)
    for axis, length in zip(axes[0], lengths):
        at_length = overall([c for c in cells if c.length == length])
        for method in sorted({c.method for c in at_length} - {"full"}):
            points = sorted((c.budget, c.accuracy) for c in at_length if c.method == method)
            axis.plot([b for b, _ in points], [a for _, a in points], marker="o", label=method)
        for cell in at_length:
            if cell.method == "full":
                axis.axhline(cell.accuracy, linestyle="--", color="black", label="full")
        axis.set_xscale("log", base=2)
        axis.set_title(f"{length}-token prompts")
        axis.set_xlabel("budget (tokens per head)")
        axis.set_ylim(-0.05, 1.05)
    axes[0][0].set_ylabel("accuracy")
    axes[0][-1].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(file, format="png", dpi=110)
    plt.close(figure)
