"""How the cost of a question grows with the prompt, to 32k tokens: full cache vs SnapKV at several budgets.

One configuration (length, method, budget) per fresh process, so each peak RSS is that configuration's own; one
run per configuration (a long prefill on this 2-core machine takes minutes). Each process loads the model, builds
exactly LENGTH tokens of prose (the benchmark haystack), prefills it with the model's default prefill chunk (or
``--prefill-chunk``) and decodes ``--new-tokens`` tokens greedily without stopping, through the same
``generate_answer`` that ``snapkv ask`` uses. It records prefill seconds (and the selection's share), decode
tokens/s, the KV bytes the cache holds after the prefill, the peak RSS during the run and the RSS before it (after a
16-token warm-up forward, so the weights are resident: the difference is what the question itself costs).

Usage (heavy: run under the shared lock)::

    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.bench.long_cost_bench --model gemma3-270m --threads 1 \
        --lengths 1024,2048,4096,8192,16384,32768 --budgets 1024,256,2048 --out docs/results/long_cost.json
    .venv/bin/python -m tools.bench.long_cost_bench --plot docs/results/long_cost.json --png docs/long_cost_curves.png \
        --markdown docs/results/long_cost.md

On a shared 2-core machine, one intra-op thread is steadier (and there faster: with two, every operator waits for a
second thread the scheduler may not run; a decode step took 12x longer); each run records the load average.
``--plot`` only reads a results file: log-log plots, a table, and the growth exponents (least-squares slope of
log cost against log length) over 4k-32k, where the constant costs no longer dominate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from tools.docs import prose


def measure(model: str, length: int, method: str, budget: int | None, new_tokens: int, chunk: int | None,
            threads: int | None) -> dict:
    from snapkv_cli.generation.allocator import return_freed_memory_to_os

    return_freed_memory_to_os()
    import torch

    if threads:
        torch.set_num_threads(threads)
    load_before = os.getloadavg()[0]

    from snapkv_cli.bench.memory import PeakRSS, current_rss_bytes
    from snapkv_cli.bench.speed import prose_ids
    from snapkv_cli.engine import CompressionSettings
    from snapkv_cli.generation import GenerationOptions, generate_answer
    from snapkv_cli.models.catalog import default_prefill_chunk
    from snapkv_cli.models.loader import load_model

    started = time.perf_counter()
    loaded = load_model(model, device="cpu")
    load_s = time.perf_counter() - started
    chunk = chunk if chunk is not None else default_prefill_chunk(loaded.name, loaded.model.config)
    ids = prose_ids(loaded.tokenizer, length)
    settings = CompressionSettings(method=method, window_size=32, max_capacity_prompt=budget or 33, kernel_size=15,
                                   pooling="maxpool")
    from snapkv_cli.engine import SnapKVCache, prepare
    from snapkv_cli.generation import prefill

    prepare(loaded.model)
    with torch.inference_mode():  # a 16-token forward: every weight page resident, kernels warm
        prefill(loaded.model, ids[:16], SnapKVCache(method="full", config=loaded.model.config))
    rss_before = current_rss_bytes()
    with PeakRSS() as peak:
        result = generate_answer(loaded.model, loaded.tokenizer, ids, settings,
                                 GenerationOptions(max_new_tokens=new_tokens, stop_at_eos=False,
                                                   prefill_chunk=chunk))
    summary = result.cache.summary()
    return {
        "model": loaded.name, "length": length, "method": method, "budget": budget, "prefill_chunk": chunk,
        "load_s": round(load_s, 2), "prefill_s": round(result.prefill_s, 2),
        "selection_s": round(result.cache.selection_seconds, 3),
        "decode_tokens_per_s": round(result.decode_tokens_per_s, 3), "decode_steps": result.decode_steps,
        "kv_bytes_before": summary["bytes_before"], "kv_bytes_after": summary["bytes_after"],
        "rss_before_prefill": rss_before, "peak_rss": peak.bytes,
        "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch_threads": torch.get_num_threads(), "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
    }


def configurations(lengths: list[int], budgets: list[int]) -> list[tuple[int, str, int | None]]:
    """Full and the first budget at every length first, then the other budgets: an interrupted run (resumed from
    ``--out``) has the main comparison complete."""
    first, rest = budgets[:1], budgets[1:]
    runs = []
    for group in (first, rest):
        for length in lengths:
            if group is first:
                runs.append((length, "full", None))
            runs += [(length, "snapkv", budget) for budget in group if budget < length]
    return runs


def run_all(args) -> None:
    lengths = [int(x) for x in args.lengths.split(",")]
    budgets = [int(x) for x in args.budgets.split(",")]
    from snapkv_cli.bench.provenance import provenance, run_start, write_result

    start, done = run_start(), []
    if args.out and args.out.exists():  # resume: keep what an interrupted run finished (and when it began)
        previous = json.loads(args.out.read_text(encoding="utf-8"))
        start, done = previous["provenance"], previous["runs"]
    finished = {(row["length"], row["method"], row["budget"]) for row in done}
    for length, method, budget in configurations(lengths, budgets):
        if (length, method, budget) in finished:
            continue
        command = [sys.executable, __file__, "--one", f"{length}:{method}:{budget or 0}", "--model", args.model,
                   "--new-tokens", str(args.new_tokens)]
        if args.prefill_chunk is not None:
            command += ["--prefill-chunk", str(args.prefill_chunk)]
        if args.threads is not None:
            command += ["--threads", str(args.threads)]
        proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if proc.returncode != 0:
            print(f"{length} {method} {budget}: failed\n{proc.stderr[-3000:]}", file=sys.stderr, flush=True)
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        done.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            write_result(args.out, "long_cost", args, provenance(None, start), runs=done)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(y) against log(x)."""
    points = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    num = sum((x - mean_x) * (y - mean_y) for x, y in points)
    den = sum((x - mean_x) ** 2 for x, _ in points)
    return num / den if den else None


def label(row: dict) -> str:
    return "full" if row["method"] == "full" else f"snapkv {row['budget']}"


def by_label(rows: list[dict]) -> dict[str, list[dict]]:
    """Each method's runs (full, snapkv BUDGET), by increasing length."""
    series: dict[str, list[dict]] = {}
    for row in sorted(rows, key=lambda r: r["length"]):
        series.setdefault(label(row), []).append(row)
    return series


def plot(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = json.loads(args.plot.read_text(encoding="utf-8"))["runs"]
    series = by_label(rows)
    panels = [("prefill_s", "prefill (s)"), ("peak_rss", "peak RSS (MB)"), ("kv_bytes_after", "KV stored (MB)"),
              ("decode_tokens_per_s", "decode (tokens/s)")]
    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    for axis, (key, title) in zip(axes.flat, panels):
        scale = 1e6 if key in ("peak_rss", "kv_bytes_after") else 1
        for name, points in series.items():
            axis.plot([p["length"] for p in points], [p[key] / scale for p in points], marker="o", label=name)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("prompt tokens")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
    axes.flat[0].legend()
    model = rows[0]["model"] if rows else "?"
    figure.suptitle(f"Cost vs prompt length: {model}, CPU ({rows[0]['torch_threads'] if rows else '?'} threads), "
                    "one run per point")
    figure.tight_layout()
    figure.savefig(args.png, dpi=110)

    text = markdown(rows)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    print(text)


def markdown(rows: list[dict]) -> str:
    """Every run as a table row, then each method's growth exponents over 4k-32k (``tools/docs/tables.py`` prints this
    into ``docs/benchmarks.md``)."""
    series = by_label(rows)
    threads = sorted({row["torch_threads"] for row in rows})
    loads = [value for row in rows for value in (row["load_average_before"], row["load_average_after"])]
    lines = [f"Each run: {'/'.join(map(str, threads))} torch thread(s); load average {min(loads):.1f} to "
             f"{max(loads):.1f} across the runs.", "",
             "| prompt | method | prefill s | selection s | decode tok/s | KV before MB | KV stored MB | "
             "RSS before MB | peak RSS MB |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in sorted(rows, key=lambda r: (r["length"], r["method"] != "full", r["budget"] or 0)):
        lines.append(f"| {row['length']} | {label(row)} | {row['prefill_s']:.1f} | {row['selection_s']:.2f} | "
                     f"{row['decode_tokens_per_s']:.2f} | {row['kv_bytes_before'] / 1e6:.1f} | "
                     f"{row['kv_bytes_after'] / 1e6:.1f} | {row['rss_before_prefill'] / 1e6:.0f} | "
                     f"{row['peak_rss'] / 1e6:.0f} |")
    lines += ["", "Growth exponents (slope of log cost against log length, 4k-32k):", "",
              "| method | prefill time | peak RSS | peak RSS above the loaded model | KV stored |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for name, points in series.items():
        tail = [p for p in points if p["length"] >= 4096]

        def fit(value, tail=tail) -> str:
            found = slope([(p["length"], value(p)) for p in tail])
            return f"{found:.2f}" if found is not None else "-"

        lines.append(f"| {name} | {fit(lambda p: p['prefill_s'])} | {fit(lambda p: p['peak_rss'])} | "
                     f"{fit(lambda p: p['peak_rss'] - p['rss_before_prefill'])} | "
                     f"{fit(lambda p: p['kv_bytes_after'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--lengths", default="1024,2048,4096,8192,16384,32768")
    parser.add_argument("--budgets", default="256,1024,2048")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prefill-chunk", type=int, default=None, help="default: the model's default chunk")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, help="plot a results file instead of running")
    parser.add_argument("--png", type=Path, default=Path("docs/long_cost_curves.png"))
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plot:
        plot(args)
    elif args.one:
        length, method, budget = args.one.split(":")
        print(json.dumps(measure(args.model, int(length), method, int(budget) or None, args.new_tokens,
                                 args.prefill_chunk, args.threads)), flush=True)
    else:
        run_all(args)


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def long_cost_table(path: str) -> str:
    """Cost against prompt length, every run, and the growth exponents."""
    return markdown(prose.load(path)["runs"])


TABLES = {"long-cost-table": long_cost_table}


if __name__ == "__main__":
    main()
