"""Prefill and decode time of each compression method next to SnapKV's, on one prompt, in one process.

Every method prefills the same ~8k-token prose prompt on the default model the way ``snapkv ask`` does (its prefill
chunk) and decodes ``--new-tokens`` tokens, in rounds: each round runs every method once, in a rotated order, so that
load on a shared machine falls on all of them alike. A method's own work happens in the cache's selection step
(window queries, scoring, allotment, ranking, gathering), timed as ``selection_s`` inside the prefill. Per method:

- its prefill against SnapKV's in the same round (the median of the per-round ratios);
- the difference of the median selection times, as a share of SnapKV's median prefill (the cost the method adds,
  free of the noise of the other 99% of the prefill);
- its decode speed against SnapKV's in the same round, beside SnapKV's own spread over the rounds (the noise);
- the tokens kept and the slots allocated (AdaKV's layout pads each layer to its fullest head), and the KV bytes.

Usage (``run_benchmarks.sh methodstiming``)::

    OMP_NUM_THREADS=1 .venv/bin/python -m tools.bench.methods_timing --rounds 4 --out docs/results/methods_timing.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from tools.docs import prose

METHODS = ("snapkv", "pyramidkv", "adakv", "criticalkv", "defensivekv", "chunkkv", "defensivekv+uniformheads")


def summarize(runs: list[dict]) -> list[dict]:
    """One row per method from the runs (each a dict of round, method and timings), SnapKV the reference."""
    by_round = {(run["round"], run["method"]): run for run in runs}
    methods = list(dict.fromkeys(run["method"] for run in runs))

    def median(method: str, key: str) -> float:
        return statistics.median(run[key] for run in runs if run["method"] == method)

    def against_snapkv(method: str, key: str) -> list[float]:
        return [run[key] / by_round[(run["round"], "snapkv")][key] - 1 for run in runs if run["method"] == method]

    base_prefill, base_selection = median("snapkv", "prefill_s"), median("snapkv", "selection_s")
    base_decode = [run["decode_tokens_per_s"] for run in runs if run["method"] == "snapkv"]
    decode_noise = max(base_decode) / min(base_decode) - 1
    rows = []
    for method in methods:
        last = [run for run in runs if run["method"] == method][-1]
        rows.append({
            "method": method,
            "prefill_s": median(method, "prefill_s"),
            "prefill_vs_snapkv": statistics.median(against_snapkv(method, "prefill_s")),
            "selection_s": median(method, "selection_s"),
            "selection_overhead_vs_snapkv": (median(method, "selection_s") - base_selection) / base_prefill,
            "decode_tokens_per_s": median(method, "decode_tokens_per_s"),
            "decode_vs_snapkv": statistics.median(against_snapkv(method, "decode_tokens_per_s")),
            "snapkv_decode_spread": decode_noise,
            "tokens_after": last["tokens_after"], "tokens_allocated": last["tokens_allocated"],
            "bytes_after": last["bytes_after"],
        })
    return rows


def markdown(rows: list[dict]) -> str:
    from snapkv_cli.bench.render import markdown_table

    header = ["method", "prefill s", "prefill vs snapkv", "selection s", "selection's share of the prefill, vs snapkv",
              "decode tokens/s", "decode vs snapkv", "tokens kept", "slots allocated", "KV MB"]
    body = [[row["method"], f"{row['prefill_s']:.1f}", f"{100 * row['prefill_vs_snapkv']:+.1f}%",
             f"{row['selection_s']:.3f}", f"{100 * row['selection_overhead_vs_snapkv']:+.2f}%",
             f"{row['decode_tokens_per_s']:.1f}", f"{100 * row['decode_vs_snapkv']:+.1f}%",
             f"{row['tokens_after']:,.0f}", f"{row['tokens_allocated']:,.0f}", f"{row['bytes_after'] / 1e6:.1f}"]
            for row in rows]
    noise = rows[0]["snapkv_decode_spread"]
    return markdown_table(header, body) + (f"\nSnapKV's own decode speed differed by {100 * noise:.1f}% between its "
                                           "fastest and slowest round (the noise the decode column is read against).\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--budget", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma-separated method labels, as `snapkv bench` takes them; snapkv is always run")
    parser.add_argument("--out", type=Path, help="also write the runs and their summary with provenance here")
    args = parser.parse_args()
    from snapkv_cli.bench.provenance import provenance, run_start, write_result

    start = run_start()
    from snapkv_cli.generation.allocator import return_freed_memory_to_os

    return_freed_memory_to_os()  # as `snapkv ask` does
    from snapkv_cli.bench.grid import MethodGrid
    from snapkv_cli.bench.speed import prose_ids
    from snapkv_cli.engine.hooks import attached
    from snapkv_cli.generation import GenerationOptions, generate_answer
    from snapkv_cli.models.catalog import default_prefill_chunk
    from snapkv_cli.models.loader import load_model

    methods = list(dict.fromkeys(["snapkv", *args.methods.split(",")]))
    loaded = load_model(None, device="cpu")
    ids = prose_ids(loaded.tokenizer, args.length)
    options = GenerationOptions(max_new_tokens=args.new_tokens, stop_at_eos=False,
                                prefill_chunk=default_prefill_chunk(loaded.name, loaded.model.config))
    runs = []
    with attached(loaded.model):
        for round_index in range(args.rounds):
            shift = round_index % len(methods)
            for method in methods[shift:] + methods[:shift]:
                settings = MethodGrid().settings(method, args.budget)  # the CLI's settings, as `snapkv bench` runs
                result = generate_answer(loaded.model, loaded.tokenizer, ids, settings, options)
                summary = result.cache.summary()
                run = {"round": round_index, "method": method, "prefill_s": round(result.prefill_s, 3),
                       "selection_s": round(result.cache.selection_seconds, 4),
                       "decode_tokens_per_s": round(result.decode_tokens_per_s, 2),
                       "tokens_after": summary["tokens_after"], "tokens_allocated": summary["tokens_allocated"],
                       "bytes_after": summary["bytes_after"]}
                runs.append(run)
                print(json.dumps(run), file=sys.stderr, flush=True)
                del result
    rows = summarize(runs)
    print(markdown(rows))
    if args.out:
        write_result(args.out, "methods_timing", args, provenance(loaded, start), prompt_tokens=len(ids), runs=runs,
                     rows=rows)
    return 0


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def methods_timing(path: str) -> str:
    """Every method's prefill, selection and decode next to SnapKV's, recomputed from
    the runs."""
    return markdown(summarize(prose.load(path)["runs"]))


def methods_timing_facts(path: str) -> dict[str, str]:
    """The prompt, budget, decoded tokens, rounds and threads, and where it ran."""
    report = prose.load(path)
    args, where = report["args"], report["provenance"]
    return {"prompt-tokens": f"{report['prompt_tokens']:,}", "budget": str(args["budget"]),
            "new-tokens": str(args["new_tokens"]), "rounds": str(args["rounds"]),
            "threads": str(where["machine"]["torch_threads"]), "commit": prose.commit(where),
            "load-before": f"{where['load_average_before'][0]:.1f}",
            "load-after": f"{where['load_average_after'][0]:.1f}"}


TABLES = {"methods-timing": methods_timing}
FACTS = {"methods-timing": methods_timing_facts}


if __name__ == "__main__":
    sys.exit(main())
