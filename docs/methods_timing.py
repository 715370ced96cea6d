"""Prefill and decode time of each compression method next to SnapKV's, on one prompt, in one process.

Every method runs the same ~8k-token prose prompt on the default model, in rounds (each round runs every method once,
in a rotated order), so that load on a shared machine falls on all of them alike. A method's own work happens in the
cache's selection step (window queries, scoring, allotment, ranking, gathering), timed as ``selection_s`` inside the
prefill; its overhead over SnapKV is the difference of the median selection times, as a share of SnapKV's median
prefill (the whole prefill is also reported, but moves by more than 5% between identical runs here).

Run (under the shared lock, it takes several minutes of CPU)::

    flock /tmp/snapkv-heavy.lock .venv/bin/python docs/methods_timing.py --json docs/results/methods_timing.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

import torch

from snapkv_cli.bench.speed import prose_ids
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.engine.hooks import attached
from snapkv_cli.generation import generate_answer
from snapkv_cli.models.loader import load_model

METHODS = ("snapkv", "pyramidkv", "adakv", "criticalkv", "defensivekv", "chunkkv")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--budget", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    methods = args.methods.split(",")
    loaded = load_model(None, device="cpu")
    ids = prose_ids(loaded.tokenizer, args.length)
    runs = []
    with attached(loaded.model):
        for round_index in range(args.rounds):
            order = methods[round_index % len(methods):] + methods[:round_index % len(methods)]
            for method in order:
                settings = CompressionSettings(method=method, window_size=32, max_capacity_prompt=args.budget,
                                               kernel_size=15, pooling="maxpool")
                result = generate_answer(loaded.model, loaded.tokenizer, ids, settings,
                                         max_new_tokens=args.new_tokens, stop_at_eos=False)
                summary = result.cache.summary()
                run = {"round": round_index, "method": method, "prefill_s": round(result.prefill_s, 3),
                       "selection_s": round(result.cache.selection_seconds, 4),
                       "decode_tokens_per_s": round(result.decode_tokens_per_s, 2),
                       "tokens_after": summary["tokens_after"], "tokens_allocated": summary["tokens_allocated"],
                       "bytes_after": summary["bytes_after"]}
                runs.append(run)
                print(json.dumps(run), file=sys.stderr, flush=True)
                del result
    rows = []
    median = lambda method, key: statistics.median(r[key] for r in runs if r["method"] == method)
    base_prefill, base_selection = median("snapkv", "prefill_s"), median("snapkv", "selection_s")
    base_decode = median("snapkv", "decode_tokens_per_s")
    for method in methods:
        last = [r for r in runs if r["method"] == method][-1]
        rows.append({
            "method": method,
            "prefill_s": median(method, "prefill_s"),
            "selection_s": median(method, "selection_s"),
            "selection_overhead_vs_snapkv": round((median(method, "selection_s") - base_selection) / base_prefill, 4),
            "prefill_vs_snapkv": round(median(method, "prefill_s") / base_prefill - 1, 4),
            "decode_tokens_per_s": median(method, "decode_tokens_per_s"),
            "decode_vs_snapkv": round(median(method, "decode_tokens_per_s") / base_decode - 1, 4),
            "tokens_after": last["tokens_after"], "tokens_allocated": last["tokens_allocated"],
            "kv_mb": round(last["bytes_after"] / 1e6, 2),
        })
    header = ["method", "prefill s", "selection s", "selection overhead", "prefill vs snapkv", "decode tok/s",
              "decode vs snapkv", "tokens kept", "slots", "KV MB"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print(f"| {row['method']} | {row['prefill_s']:.2f} | {row['selection_s']:.3f} | "
              f"{100 * row['selection_overhead_vs_snapkv']:+.2f}% | {100 * row['prefill_vs_snapkv']:+.1f}% | "
              f"{row['decode_tokens_per_s']:.2f} | {100 * row['decode_vs_snapkv']:+.1f}% | {row['tokens_after']} | "
              f"{row['tokens_allocated']} | {row['kv_mb']} |")
    if args.json:
        args.json.write_text(json.dumps({
            "kind": "methods_timing", "length": args.length, "budget": args.budget, "rounds": args.rounds,
            "new_tokens": args.new_tokens, "model": loaded.name, "torch_threads": torch.get_num_threads(),
            "machine": platform.platform(), "rows": rows, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
