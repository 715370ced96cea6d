"""Apply the committed rule that chooses the default method (docs/decisions/2026-12-02-default-method-rule.md) to
the confirmation run's JSON, and print the decision with every number it rests on.

    .venv/bin/python -m tools.bench.default_rule docs/results/default_rule

Reads ``synthetic.json`` and ``docqa.json`` (``snapkv bench accuracy --json``), ``niah.json`` (``snapkv bench niah
--json``) and ``prefill.json`` (``tools.bench.methods_timing --out``) from the folder. This file is the rule in code:
it was written and committed with the note, before the run.

- Pairs: every (task, length, sample) both runs answered where the full cache answered right; retention = kept / those.
- Paired difference of A and B: (pairs only A keeps - pairs only B keeps) / full-right pairs, with a 95% interval from
  the exact (Clopper-Pearson) interval of the discordant pairs' split; A and B tie when it includes 0.
- NIAH: a cell is lost when the full cache's answer is exact and the candidate's is not.
- Prefill: per round, each candidate's prefill seconds over SnapKV's in that round; "costs less" = lower median and
  min-max ranges that do not overlap.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from tools.docs import prose

SNAPKV = "snapkv"
CURRENT_DEFAULT = "defensivekv+uniformheads+causalpool"
CANDIDATES = (SNAPKV, "snapkv+pyramid", "snapkv+sharedheads", CURRENT_DEFAULT)
SNAPKV_VARIANTS = ("snapkv+pyramid", "snapkv+sharedheads")
BUDGETS = (1024, 256)
MIN_PAIRS = 20


def _binomial_cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


def clopper_pearson(successes: int, trials: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact two-sided interval of a binomial proportion (bisection on the binomial CDF; no scipy needed)."""
    def solve(predicate) -> float:
        low, high = 0.0, 1.0
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if predicate(middle) else (low, middle)
        return (low + high) / 2

    lower = 0.0 if successes == 0 else solve(lambda p: 1 - _binomial_cdf(successes - 1, trials, p) < alpha / 2)
    upper = 1.0 if successes == trials else solve(lambda p: _binomial_cdf(successes, trials, p) > alpha / 2)
    return lower, upper


def paired_difference(a: dict, b: dict, full_right: set) -> dict:
    """A's retention minus B's on the same full-right pairs, with the exact interval of the discordant split."""
    only_a = sum(1 for key in full_right if a.get(key) and not b.get(key))
    only_b = sum(1 for key in full_right if b.get(key) and not a.get(key))
    n, discordant = len(full_right), only_a + only_b
    if discordant == 0:
        interval = (0.0, 0.0)
    else:
        low, high = clopper_pearson(only_a, discordant)
        interval = (discordant * (2 * low - 1) / n, discordant * (2 * high - 1) / n)
    return {"only_a": only_a, "only_b": only_b, "difference": (only_a - only_b) / n if n else 0.0,
            "interval": [round(interval[0], 4), round(interval[1], 4)], "tie": interval[0] <= 0 <= interval[1]}


def accuracy_pairs(reports: list[dict]) -> tuple[dict, dict]:
    """(full-right keys, {(label, budget): {key: correct}}) over the accuracy runs."""
    full: dict = {}
    methods: dict = {}
    for report in reports:
        for outcome in report["outcomes"]:
            key = (outcome["task"], outcome["length"], outcome["sample"])
            if outcome["method"] == "full":
                full[key] = outcome["correct"]
            else:
                methods.setdefault((outcome["method"], outcome["budget"]), {})[key] = outcome["correct"]
    return {key for key, right in full.items() if right}, methods


def niah_cells(report: dict) -> tuple[set, dict]:
    full, methods = set(), {}
    for outcome in report["outcomes"]:
        key = (outcome["length"], outcome["depth"])
        if outcome["method"] == "full":
            if outcome["exact"]:
                full.add(key)
        else:
            methods.setdefault((outcome["method"], outcome["budget"]), {})[key] = outcome["exact"]
    return full, methods


def prefill_ratios(report: dict) -> dict[str, dict]:
    by_round: dict = {}
    for run in report["runs"]:
        by_round.setdefault(run["round"], {})[run["method"]] = run["prefill_s"]
    ratios: dict[str, list[float]] = {}
    for runs in by_round.values():
        for method, seconds in runs.items():
            ratios.setdefault(method, []).append(seconds / runs[SNAPKV])
    return {method: {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
                     "max": round(max(values), 4), "rounds": len(values)} for method, values in ratios.items()}


def costs_less(a: str, b: str, prefill: dict) -> bool:
    return prefill[a]["median"] < prefill[b]["median"] and prefill[a]["max"] < prefill[b]["min"]


def decide(folder: Path) -> dict:
    load = lambda name: json.loads((folder / name).read_text(encoding="utf-8"))
    synthetic, docqa = load("synthetic.json"), load("docqa.json")
    full_right, methods = accuracy_pairs([synthetic, docqa])
    docqa_right, docqa_methods = accuracy_pairs([docqa])
    niah_full, niah = niah_cells(load("niah.json"))
    prefill = prefill_ratios(load("prefill.json"))
    result: dict = {"full_right_pairs": len(full_right), "docqa_full_right_pairs": len(docqa_right),
                    "niah_full_exact_cells": len(niah_full), "prefill_vs_snapkv": prefill, "budgets": {}}
    for budget in BUDGETS:
        rows = {}
        for label in CANDIDATES:
            answers = methods.get((label, budget), {})
            kept = sum(1 for key in full_right if answers.get(key))
            docqa_kept = sum(1 for key in docqa_right if docqa_methods.get((label, budget), {}).get(key))
            lost_cells = sorted(key for key in niah_full if not niah.get((label, budget), {}).get(key))
            rows[label] = {"kept": kept, "retention": kept / len(full_right) if full_right else None,
                           "docqa_kept": docqa_kept, "niah_lost": [list(key) for key in lost_cells]}
        cheaper_first = sorted(CANDIDATES, key=lambda label: (-rows[label]["kept"],
                                                              prefill.get(label, {}).get("median", math.inf)))
        best = cheaper_first[0]
        for label in CANDIDATES:
            rows[label]["against_best"] = paired_difference(methods.get((label, budget), {}),
                                                            methods.get((best, budget), {}), full_right)
        result["budgets"][budget] = {"best": best, "candidates": rows}

    at_default = result["budgets"][1024]
    best = at_default["best"]
    rows = at_default["candidates"]

    def qualifies(label: str) -> bool:
        lost_that_best_keeps = set(map(tuple, rows[label]["niah_lost"])) - set(map(tuple, rows[best]["niah_lost"]))
        return (label == best or rows[label]["against_best"]["tie"]) and not lost_that_best_keeps and (
            label == best or costs_less(label, best, prefill))

    if len(full_right) < MIN_PAIRS:
        default, why = CURRENT_DEFAULT, f"too few pairs ({len(full_right)} < {MIN_PAIRS}): the default stays"
    elif qualifies(SNAPKV):
        default, why = SNAPKV, f"snapkv ties the best ({best}), loses no needle cell it keeps, and costs no more"
    elif variants := [label for label in SNAPKV_VARIANTS if qualifies(label)]:
        default = min(variants, key=lambda label: (prefill[label]["median"], -rows[label]["kept"]))
        why = f"{default} ties the best ({best}), loses no needle cell it keeps, and costs less"
    else:
        default, why = best, f"no SnapKV variant ties {best} at no more cost: the best is the default"
    result["default"], result["why"] = default, why
    small = result["budgets"][256]
    result["small_budget_choice"] = small["best"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = decide(args.folder)
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def default_rule_table(folder: str) -> str:
    """The committed default-method rule applied to its confirmation run (recomputed from the run's JSON)."""
    result = decide(prose.DOCS / folder)
    prefill = result["prefill_vs_snapkv"]
    rows = []
    for budget, block in result["budgets"].items():
        for label, row in block["candidates"].items():
            against = row["against_best"]
            cost = prefill.get(label)
            rows.append([label, str(budget), f"{row['kept']} / {result['full_right_pairs']}",
                         f"{row['docqa_kept']} / {result['docqa_full_right_pairs']}",
                         f"{100 * against['difference']:+.1f} points [{100 * against['interval'][0]:+.1f}, "
                         f"{100 * against['interval'][1]:+.1f}]" + (" tie" if against["tie"] else ""),
                         ", ".join(f"{length // 1024}k {depth:.0f}%" for length, depth in row["niah_lost"]) or "none",
                         f"{cost['median']:.2f} ({cost['min']:.2f}-{cost['max']:.2f})"
                         if cost and str(budget) == "1024" else "-"])
    header = ["candidate", "budget", "full cache's right answers kept", "of which docqa",
              "against the best (95% interval)", "needle cells lost", "prefill / SnapKV's (8k, 1024)"]
    return prose.table((header, rows))


def default_rule_facts(folder: str) -> dict[str, str]:
    """The default-method rule on its confirmation run: the full cache's right answers, each candidate's kept
    (``kept-1024-snapkv``; the default method as ``default``), the verdict on SnapKV at 1024 and the rule's outcome."""
    result = decide(prose.DOCS / folder)
    if result["default"] != prose.DEFAULT_METHOD:
        raise ValueError(f"the rule picked {result['default']}, but the CLI's default is {prose.DEFAULT_METHOD}")
    snapkv = result["budgets"][1024]["candidates"]["snapkv"]["against_best"]
    facts = {"full": str(result["full_right_pairs"]), "best-1024": f"`{result['budgets'][1024]['best']}`",
             "outcome": f"`{result['default']}`", "why": result["why"],
             "best-256": f"`{result['small_budget_choice']}`",
             "snapkv-1024": "a tie by the rule" if snapkv["tie"] else "a loss"}
    for budget, block in result["budgets"].items():
        for label, row in block["candidates"].items():
            facts[f"kept-{budget}-{'default' if label == prose.DEFAULT_METHOD else label}"] = str(row["kept"])
    return facts


TABLES = {"default-rule": default_rule_table}
FACTS = {"default-rule": default_rule_facts}


if __name__ == "__main__":
    sys.exit(main())
