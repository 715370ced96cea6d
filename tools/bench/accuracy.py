"""The tables and facts of ``snapkv bench accuracy`` runs (the steps of ``tools/bench/run_benchmarks.sh`` that run it):
accuracy and retention per task, method, budget and length, the defaults sweep, the default method's test pairs."""

from __future__ import annotations

import json

from tools.docs import prose


def _accuracy(paths: tuple[str, ...]) -> dict:
    from snapkv_cli.bench.accuracy import merge_reports

    return merge_reports([prose.load(path) for path in paths])


def accuracy_table(*paths: str) -> str:
    """Per task, method and budget; per length accuracy and retention (several JSONs: one run per length)."""
    from snapkv_cli.bench.render import accuracy_rows

    return prose.table(accuracy_rows(_accuracy(paths)))


def accuracy_by_length(*paths: str) -> str:
    """The tasks pooled at each length (never the lengths)."""
    from snapkv_cli.bench.render import accuracy_rows

    header, rows = accuracy_rows(_accuracy(paths), pool_tasks=True)
    return prose.table((header[1:], [row[1:] for row in rows]))


def prompt_ranges(*paths: str) -> str:
    from snapkv_cli.bench.render import prompt_ranges as ranges

    return prose.table(ranges(_accuracy(paths)))


def retention_pooled(*arguments: str) -> str:
    """Retention pooled over tasks and lengths: per budget, each method's pairs kept over every length of the JSONs.

    Arguments: the JSON paths, then ``methods=a,b`` (the columns) and ``budgets=128,256`` (the rows).
    """
    options = dict(argument.split("=", 1) for argument in arguments if "=" in argument)
    paths = tuple(argument for argument in arguments if "=" not in argument)
    pooled = _pooled_retention(paths)
    methods = options["methods"].split(",")
    rows = []
    for budget in options["budgets"].split(","):
        cells = []
        for method in methods:
            counts = pooled.get((method, int(budget)))
            if counts is None or counts.retention is None:
                cells.append("not run")
                continue
            low, high = counts.retention_interval
            cells.append(f"{counts.kept} / {counts.full_correct} ({100 * counts.retention:.1f}%) "
                         f"[{100 * low:.0f}-{100 * high:.0f}]")
        rows.append([budget, *cells])
    return prose.table((["budget", *(f"{method}: kept / pairs [95% CI]" for method in methods)], rows))


def _pooled_retention(paths: tuple[str, ...]) -> dict:
    """Per (method, budget): the counts of every task and every length of the JSONs pooled, pair by pair."""
    from dataclasses import replace

    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    pooled_length = 0  # every length under one key: tally pools tasks, and this pools the lengths too
    outcomes = [replace(o, length=pooled_length) for o in outcomes_from_json(_accuracy(paths))]
    return {(method, budget): counts for (task, length, method, budget), counts
            in tally(outcomes, pool_tasks=True).items()}


def defaults_table(folder: str, *budgets: str) -> str:
    """The defaults sweep (tune split): per setting, full and SnapKV accuracy at each budget, pooled over lengths
    only when the sweep ran a single length (it does)."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    header = ["settings", "full"] + [f"snapkv {budget}" for budget in budgets]
    rows = []
    for path in sorted((prose.DOCS / folder).glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        tallies = tally(outcomes_from_json(report), pool_tasks=True)
        lengths = {key[1] for key in tallies}
        assert len(lengths) == 1, f"{path.name}: the defaults table expects one length"
        (length,) = lengths

        cells = [tallies[("all", length, "full", None)]]
        cells += [tallies[("all", length, "snapkv", int(budget))] for budget in budgets]
        rows.append([path.stem] + [f"{counts.correct}/{counts.samples}" for counts in cells])
    return prose.table((header, rows))


# Every test pair of the default at 4k-8k: each task's shard (every method and the full cache), the default's own
# runs on the 4k shards' samples, and the second 4k draw of the two tasks the full cache answers.
DEFAULT_TEST_PAIRS = tuple(
    [f"results/beyond/4096_{task}.json" for task in ("single_needle", "multi_key", "multi_value", "question_first",
                                                     "variable_tracking")]
    + [f"results/beyond/4096_{task}_{prose.DEFAULT_METHOD}.json"
       for task in ("single_needle", "multi_key", "multi_value", "question_first")]
    + [f"results/beyond/4096_{task}_seed1.json" for task in ("single_needle", "multi_key")]
    + [f"results/beyond/8192_{task}.json" for task in ("single_needle", "multi_key", "multi_value",
                                                       "variable_tracking", "question_first")])


def _retention_facts(prefix: str, counts) -> dict[str, str]:
    """Kept / full-correct pairs (``prefix-kept``), the share with its interval (``prefix-retention``) and the interval
    alone (``prefix-interval``)."""
    return {f"{prefix}-kept": f"{counts.kept} / {counts.full_correct} ({100 * counts.retention:.1f}%)",
            f"{prefix}-retention": f"{100 * counts.retention:.0f}% ({prose.interval(counts.retention_interval)})",
            f"{prefix}-interval": prose.interval(counts.retention_interval)}


def accuracy_facts(*paths: str) -> dict[str, str]:
    """The full cache's accuracy at each length (``full-4k``: right / samples with the interval) and every budget's
    retention (``snapkv-1024-4k-kept``, ``-retention``, ``-interval``); ``commits``."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    facts = {"commits": prose.commits(paths)}
    tallies = tally(outcomes_from_json(_accuracy(paths)), pool_tasks=True)
    for (_, length, method, budget), counts in tallies.items():
        if method == "full":
            facts[f"full-{length // 1024}k"] = (f"{counts.correct}/{counts.samples} ({100 * counts.accuracy:.0f}%, "
                                                 f"{prose.interval(counts.accuracy_interval)})")
        elif counts.retention is not None:
            facts |= _retention_facts(f"{method}-{budget}-{length // 1024}k", counts)
    return facts


def default_test_facts() -> dict[str, str]:
    """The default method's retention pooled over every test pair at 4k-8k (:data:`DEFAULT_TEST_PAIRS`) per budget
    (``128-kept``, ``128-interval`` ...) and the commits those runs ran at."""
    prose.check_default_label()
    facts = {"commits": prose.commits(DEFAULT_TEST_PAIRS)}
    for (method, budget), counts in _pooled_retention(DEFAULT_TEST_PAIRS).items():
        if method == prose.DEFAULT_METHOD and counts.retention is not None:
            facts |= _retention_facts(str(budget), counts)
    return facts


TABLES = {
    "accuracy-table": accuracy_table,
    "accuracy-by-length": accuracy_by_length,
    "prompt-ranges": prompt_ranges,
    "retention-pooled": retention_pooled,
    "defaults-table": defaults_table,
}
FACTS = {"accuracy": accuracy_facts, "default-test": default_test_facts}


def stored_cells(report: dict) -> str | None:
    """An accuracy JSON's stored cells against their recomputation from its outcomes."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, summary_rows

    outcomes = outcomes_from_json(report)
    if report["cells"] != summary_rows(outcomes) or report["by_length"] != summary_rows(outcomes, pool_tasks=True):
        return "stored cells differ from the outcomes"
    return None


CHECKS = {"accuracy": stored_cells}
