"""The rule that chooses the default model (docs/decisions/2026-12-07-default-model-rule.md), in code: the cost run
and the decision. Written and committed with the note, before any model answered a held-out question.

    # the costs: a cold `snapkv ask` of a 4,096-token prompt per candidate, 2 threads, 3 rotated rounds
    .venv/bin/python -m tools.bench.default_model_rule cost --json docs/results/default_model/cost.json
    # the answers: one accuracy run per candidate, on the select split
    .venv/bin/snapkv bench accuracy --model MODEL --tasks heldout --split select --methods full,DEFAULT_METHOD \
        --budgets 1024 --lengths 4096 --samples 1000 --json > docs/results/default_model/accuracy-MODEL.json
    # the decision, with every number it rests on
    .venv/bin/python -m tools.bench.default_model_rule decide docs/results/default_model

A cost round runs every candidate once, each in a fresh process, the order rotated by one each round; the wall time
is the process's whole life (start, load, prefill, answer) and the peak RSS its own (``wait4``). The accuracy file
of a candidate may be missing (a candidate over a ceiling whose answers were not measured): it cannot be chosen.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from snapkv_cli.bench.provenance import load_average, provenance, run_start, write_result
from tools.bench.peers.llamacpp_bench import SNAPKV, make_documents, run_measured, thread_env

CANDIDATES = ("smollm2-135m-instruct", "gemma3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")
FALLBACK = "smollm2-135m-instruct"  # the default when no candidate is within the ceilings
PROMPT_TOKENS = 4096
THREADS = 2
ROUNDS = 3
QUESTION = "What is this document about? Answer in two or three sentences."
MAX_COLD_ASK_S = 60.0
MAX_PEAK_RSS_MB = 4000.0  # 4.0 x 10^9 bytes, in the MB (10^6 bytes) the runs record
TASK = "heldout"
BUDGET = 1024


def measure_costs(models: tuple[str, ...], rounds: int, work: Path) -> dict:
    """Every candidate's cold asks: ``{model: [{round, wall_s, peak_rss_mb, prompt_tokens}, ...]}``."""
    from transformers import AutoTokenizer

    from snapkv_cli.answering.prompting import load_template
    from snapkv_cli.models.catalog import find

    documents = {}
    for model in models:
        entry = find(model)
        tokenizer = AutoTokenizer.from_pretrained(entry.ensure(print))
        folder = work / model
        folder.mkdir(parents=True, exist_ok=True)
        (path, ids), = make_documents(tokenizer, load_template(None), [PROMPT_TOKENS], folder,
                                      completion=not entry.instruction_tuned).values()
        documents[model] = (path, len(ids))
    runs: dict[str, list[dict]] = {model: [] for model in models}
    for round_index in range(rounds):
        shift = round_index % len(models)
        for model in models[shift:] + models[:shift]:
            path, tokens = documents[model]
            command = [str(SNAPKV), "ask", str(path), QUESTION, "--json", "--quiet", "--model", model]
            out, wall, rss = run_measured(command, thread_env(THREADS))  # the threads come from OMP_NUM_THREADS
            report = json.loads(out)
            runs[model].append({"round": round_index, "wall_s": round(wall, 2), "peak_rss_mb": round(rss, 1),
                                "prompt_tokens": report.get("prompt_tokens", tokens), "load": load_average()})
            print(f"round {round_index + 1}/{rounds} {model}: {wall:.1f} s, {rss:,.0f} MB", file=sys.stderr)
    return runs


def answers(report: dict) -> dict[str, int]:
    """Right answers of one accuracy run on the held-out task: ``full``, ``default`` (the default method at the
    budget; a question whose prompt the budget holds whole is answered as the full cache answered it), ``questions``."""
    outcomes = [o for o in report["outcomes"] if o["task"] == TASK]
    full = {o["seed"]: o["correct"] for o in outcomes if o["method"] == "full"}
    compressed = {o["seed"]: o["correct"] for o in outcomes if o["method"] != "full" and o["budget"] == BUDGET}
    methods = {o["method"] for o in outcomes if o["method"] != "full"}
    if len(methods) > 1:
        raise SystemExit(f"one compressing method expected, found {sorted(methods)}")
    default = {seed: compressed.get(seed, right) for seed, right in full.items()}
    return {"questions": len(full), "full": sum(full.values()), "default": sum(default.values()),
            "kept": sum(full[seed] and default[seed] for seed in full)}


def decide(folder: Path) -> dict:
    """The rule applied to ``folder``'s ``cost.json`` and ``accuracy-<model>.json`` files."""
    costs = json.loads((folder / "cost.json").read_text())["runs"]
    rows = []
    for model in CANDIDATES:
        runs = costs.get(model, [])
        cold = statistics.median(run["wall_s"] for run in runs) if runs else None
        rss = max(run["peak_rss_mb"] for run in runs) if runs else None
        path = folder / f"accuracy-{model}.json"
        got = answers(json.loads(path.read_text())) if path.exists() else None
        eligible = cold is not None and cold <= MAX_COLD_ASK_S and rss <= MAX_PEAK_RSS_MB
        rows.append({"model": model, "cold_ask_s": cold, "peak_rss_mb": rss, "eligible": eligible,
                     "answers": got})
    chosen = [row for row in rows if row["eligible"] and row["answers"] is not None]
    if not chosen:
        return {"rows": rows, "default": FALLBACK, "why": "no candidate within the ceilings has measured answers"}
    best = max(chosen, key=lambda row: (row["answers"]["default"], row["answers"]["full"], -row["cold_ask_s"]))
    got = best["answers"]
    retention = got["kept"] / got["full"] if got["full"] else None
    return {"rows": rows, "default": best["model"], "retention_on_select": retention,
            "why": "the most right answers with the default method among the candidates within the ceilings"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cost = commands.add_parser("cost", help="the cold asks of every candidate")
    cost.add_argument("--models", nargs="+", default=list(CANDIDATES))
    cost.add_argument("--rounds", type=int, default=ROUNDS)
    cost.add_argument("--work", type=Path, default=Path("/tmp/snapkv-default-model"))
    cost.add_argument("--json", type=Path, required=True)
    choose = commands.add_parser("decide", help="apply the rule to a folder of results")
    choose.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.command == "cost":
        start = run_start()
        runs = measure_costs(tuple(args.models), args.rounds, args.work)
        write_result(args.json, "default_model_cost", args, provenance(None, start), prompt_tokens=PROMPT_TOKENS,
                     threads=THREADS, question=QUESTION, runs=runs)
        return 0
    print(json.dumps(decide(args.folder), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
