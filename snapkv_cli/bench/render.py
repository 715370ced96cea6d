"""Benchmark results as tables (Rich, Markdown) and a PNG plot, computed from a report's raw records alone.

Every function here takes the JSON report (``accuracy.to_json`` / ``speed.to_json``) and recomputes what it shows
from the raw ``outcomes`` or ``samples``, so the tables printed by ``snapkv bench`` and those in ``docs/`` (checked
by ``tools/docs/tables.py``) are one function of the committed JSON.
"""

from __future__ import annotations

from typing import BinaryIO

from rich.table import Table

from ..engine.methods import METHODS
from ..generation.options import generation_declarations
from .accuracy import outcomes_from_json, tally
from .retention import Tally
from .speed import compare, summarize

Rows = tuple[list[str], list[list[str]]]
_METHOD_ORDER = tuple(METHODS)  # rows in the registry's order


def _budget(budget: int | None) -> str:
    return "-" if budget is None else str(budget)


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%"


def _interval(pair: tuple[float, float] | None) -> str:
    return "" if pair is None else f"[{100 * pair[0]:.0f}-{100 * pair[1]:.0f}]"


def _method_key(method: str, budget: int | None) -> tuple:
    order = _METHOD_ORDER.index(method) if method in _METHOD_ORDER else len(_METHOD_ORDER)
    return order, method, budget or 0


def accuracy_cell(counts: Tally) -> str:
    """``"80% (40/50)"``."""
    return f"{_percent(counts.accuracy)} ({counts.correct}/{counts.samples})"


def retention_cell(counts: Tally, method: str) -> str:
    """``"95% [84-99] 38/40 +2 -2"``: kept / full-correct with its 95% interval, then gained and lost."""
    if method == "full":
        return "-"
    if counts.retention is None:
        return f"n/a (full 0/{counts.samples}) +{counts.gained}"
    return (f"{_percent(counts.retention)} {_interval(counts.retention_interval)} "
            f"{counts.kept}/{counts.full_correct} +{counts.gained} -{counts.lost}")


def accuracy_rows(report: dict, *, pool_tasks: bool = False) -> Rows:
    """One row per (task, method, budget); per length an accuracy column and a retention column.

    With ``pool_tasks`` the tasks are pooled at each length (never the lengths). A cell whose budget held every
    prompt is shown as ``uncompressed`` (it was not run).
    """
    outcomes = outcomes_from_json(report)
    tallies = tally(outcomes, pool_tasks=pool_tasks)
    lengths = sorted({key[1] for key in tallies})
    skipped = {("all" if pool_tasks else s["task"], s["length"], s["method"], s["budget"])
               for s in report.get("skipped", [])}
    plan = report["plan"]
    tasks = ["all"] if pool_tasks else [t for t in plan["tasks"] if any(k[0] == t for k in tallies)]
    cells = sorted({(key[2], key[3]) for key in tallies} | {(key[2], key[3]) for key in skipped},
                   key=lambda cell: _method_key(*cell))
    header = ["task", "method", "budget"]
    for length in lengths:
        header += [f"{length}: accuracy", f"{length}: retention [95% CI] kept/full +gained -lost"]
    rows = []
    for task in tasks:
        for method, budget in cells:
            row = [task, method, _budget(budget)]
            for length in lengths:
                counts = tallies.get((task, length, method, budget))
                if counts is None:
                    row += ["uncompressed", "-"] if (task, length, method, budget) in skipped else ["-", "-"]
                else:
                    row += [accuracy_cell(counts), retention_cell(counts, method)]
            rows.append(row)
    return header, rows


def prompt_ranges(report: dict) -> Rows:
    """Per length: the prompt tokens actually used (min-max) and the samples per task."""
    outcomes = outcomes_from_json(report)
    header = ["length", "prompt tokens (min-max)", generation_declarations()["max_new_tokens"].label,
              "samples per task"]
    rows = []
    for length in sorted({o.length for o in outcomes}):
        at = [o for o in outcomes if o.length == length and o.method == "full"] or \
             [o for o in outcomes if o.length == length]
        tokens = [o.prompt_tokens for o in at]
        new = sorted({o.max_new_tokens for o in at})
        rows.append([str(length), f"{min(tokens)}-{max(tokens)}", ",".join(map(str, new)),
                     str(len({o.sample for o in at}))])
    return header, rows


def _spread_text(values: dict | None, digits: int, percent: bool = False, times: bool = False) -> str:
    if values is None:
        return "-"
    def show(value: float) -> str:
        if percent:
            return f"{100 * value:+.{digits}f}%"
        return f"{value:.{digits}f}" + ("x" if times else "")
    return f"{show(values['median'])} [{show(values['q1'])}, {show(values['q3'])}]"


def speed_rows(report: dict) -> Rows:
    """Per configuration: medians [interquartile range] over the measured rounds."""
    header = ["prompt", "method", "budget", "runs", "prefill s", "selection s", "decode tok/s", "KV MB",
              "peak RSS MB"]
    rows = []
    for row in summarize(report["samples"]):
        rows.append([str(row["length"]), row["method"], _budget(row["budget"]), str(row["repeats"]),
                     _spread_text(row["prefill_s"], 2), f"{row['selection_s']['median']:.3f}",
                     _spread_text(row["decode_tokens_per_s"], 1), f"{row['kv_bytes'] / 2**20:.1f}",
                     f"{row['peak_rss_bytes']['median'] / 2**20:.0f}"])
    return header, rows


def comparison_rows(report: dict) -> Rows:
    """Per length and project row: ratios paired within a round, median [interquartile range]."""
    header = ["prompt", "method", "budget", "prefill vs transformers", "prefill vs full", "decode / transformers",
              "decode / full", "decode / weights-only"]
    rows = []
    for row in compare(report["samples"]):
        rows.append([str(row["length"]), row["method"], _budget(row["budget"]),
                     _spread_text(row["prefill_overhead_vs_transformers"], 1, percent=True),
                     _spread_text(row["prefill_overhead_vs_full"], 1, percent=True),
                     _spread_text(row["decode_vs_transformers"], 2, times=True),
                     _spread_text(row.get("decode_vs_full"), 2, times=True),
                     _spread_text(row["decode_vs_weights_only"], 2, times=True)])
    return header, rows


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


def accuracy_plot(report: dict, file: BinaryIO) -> None:
    """Accuracy vs budget per method (pooled over tasks at each length; the full cache dashed), with 95% intervals,
    one panel per prompt length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tallies = tally(outcomes_from_json(report), pool_tasks=True)
    lengths = sorted({key[1] for key in tallies})
    figure, axes = plt.subplots(1, len(lengths), figsize=(4.2 * len(lengths), 3.6), squeeze=False, sharey=True)
    for axis, length in zip(axes[0], lengths):
        at_length = {(key[2], key[3]): counts for key, counts in tallies.items() if key[1] == length}
        for method in sorted({m for m, _ in at_length} - {"full"}, key=lambda m: _method_key(m, None)):
            points = sorted((budget, counts) for (m, budget), counts in at_length.items() if m == method)
            budgets = [budget for budget, _ in points]
            accuracy = [counts.accuracy for _, counts in points]
            low = [a - counts.accuracy_interval[0] for a, (_, counts) in zip(accuracy, points)]
            high = [counts.accuracy_interval[1] - a for a, (_, counts) in zip(accuracy, points)]
            axis.errorbar(budgets, accuracy, yerr=[low, high], marker="o", capsize=3, label=method)
        full = at_length.get(("full", None))
        if full is not None:
            axis.axhline(full.accuracy, linestyle="--", color="black", label="full")
            axis.axhspan(*full.accuracy_interval, color="black", alpha=0.08)
        axis.set_xscale("log", base=2)
        axis.set_title(f"{length}-token prompts")
        axis.set_xlabel("budget (tokens per head)")
        axis.set_ylim(-0.05, 1.05)
    axes[0][0].set_ylabel("accuracy (95% CI)")
    axes[0][-1].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(file, format="png", dpi=110)
    plt.close(figure)

