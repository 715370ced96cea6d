"""Prefill of ``snapkv ask`` against plain transformers, side by side in one run.

    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.bench.prefill_bench --length 8192 --budget 1024 --rounds 3 \
        --json docs/results/prefill.json

Every measurement is a fresh process (as a one-shot ``snapkv ask`` is: the allocator's state and the peak RSS
start clean), and the variants take turns round after round, so a busy machine slows them alike. Each child loads
the default model, runs a 64-token warm-up forward, then prefills the same ``--length`` token ids of prose once,
and reports the prefill's wall time, its CPU time (user + system, all threads), minor page faults, the peak RSS
during the prefill (sampled every 2 ms) and the prompt KV bytes it keeps. Variants:

- ``plain``: plain transformers as a user runs it: the model never prepared (no hooks), transformers'
  ``DynamicCache``, ``model(ids, cache=..., logits_to_keep=1)``, glibc's allocator untouched; nothing of
  snapkv-cli runs in the process except the model loader.
- ``default``: what ``snapkv ask`` runs: the command's allocator call at start-up, the prepared model and
  ``generation.prefill`` into a ``SnapKVCache`` with the command line's default method and the settings it comes
  with (``snapkv_cli.bench.grid.default_label()``), ``--budget`` and the CLI's defaults.
- ``snapkv``: the same with ``--method snapkv`` (SnapKV, for the claims of SnapKV's paper).
- ``full``: the same with ``--method full`` (the project's full cache: the reference for the memory target).
- ``hooks``: ablation: the prepared model (hooks installed) with a plain ``DynamicCache``: the hooks' cost.
- ``default-mmap64k``: ablation: ``default`` with glibc's mmap threshold fixed at 64 KiB (every block above it a
  fresh mapping): the setting ``snapkv_cli.generation.allocator`` must not make.

Each run records the method it ran as a bench label (``method``; None for ``plain`` and ``hooks``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from tools.docs import prose

VARIANTS = ("plain", "default", "snapkv", "full", "hooks", "default-mmap64k")
COMPRESSING = "default"  # the variant the memory target is about: what `snapkv ask` runs


def variant_label(variant: str) -> str | None:
    """The method a variant runs, as a bench label (None: plain transformers' cache, no method)."""
    from snapkv_cli.bench.grid import default_label

    return {"default": default_label(), "default-mmap64k": default_label(), "snapkv": "snapkv",
            "full": "full"}.get(variant)


def child(variant: str, length: int, budget: int) -> dict:
    import ctypes
    import gc
    import resource
    import time

    if variant in ("default", "snapkv", "full"):
        from snapkv_cli.generation.allocator import return_freed_memory_to_os

        return_freed_memory_to_os()  # what the snapkv command does at start-up
    elif variant == "default-mmap64k":
        ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD: the low threshold the allocator avoids
    import torch
    from transformers.cache_utils import DynamicCache

    from snapkv_cli.bench.memory import PeakRSS, current_rss_bytes
    from snapkv_cli.bench.speed import prose_ids
    from snapkv_cli.models.loader import load_model

    loaded = load_model(None, device="cpu", dtype="auto")
    model = loaded.model
    ids = prose_ids(loaded.tokenizer, length)

    if variant in ("plain", "hooks"):
        if variant == "hooks":
            from snapkv_cli.engine import prepare

            prepare(model)

        def run(tokens):
            cache = DynamicCache(config=model.config)
            model(torch.tensor([tokens]), cache=cache, use_cache=True, logits_to_keep=1)
            return cache, sum(2 * layer.keys.numel() * layer.keys.element_size() for layer in cache.layers)
    else:
        from snapkv_cli.bench.grid import parse_label
        from snapkv_cli.defaults import CLI_DEFAULTS
        from snapkv_cli.engine import CompressionSettings, SnapKVCache, prepare
        from snapkv_cli.generation import prefill

        prepare(model)
        method, overrides = parse_label(variant_label(variant))
        settings = CompressionSettings(method=method, window_size=CLI_DEFAULTS["window_size"],
                                       max_capacity_prompt=budget, kernel_size=CLI_DEFAULTS["kernel_size"],
                                       pooling=CLI_DEFAULTS["pooling"], **overrides)

        def run(tokens):
            cache = SnapKVCache(settings=settings, config=model.config)
            prefill(model, tokens, cache)
            return cache, cache.summary()["bytes_after"]

    hooks = sum(len(module._forward_pre_hooks) for module in model.modules())
    with torch.inference_mode():
        run(ids[:64])
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF)
    with PeakRSS() as peak, torch.inference_mode():
        started = time.perf_counter()
        cache, kv_bytes = run(ids)
        wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"variant": variant, "method": variant_label(variant), "length": length, "budget": budget,
            "model": loaded.name,
            "dtype": str(loaded.dtype).removeprefix("torch."), "threads": torch.get_num_threads(),
            "forward_pre_hooks": hooks, "cache": type(cache).__name__, "wall_s": round(wall, 3),
            "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 3),
            "user_s": round(after.ru_utime - before.ru_utime, 3), "sys_s": round(after.ru_stime - before.ru_stime, 3),
            "minor_faults": after.ru_minflt - before.ru_minflt, "rss_before_bytes": peak.start,
            "peak_rss_bytes": peak.bytes, "rss_after_bytes": current_rss_bytes(), "kv_bytes": kv_bytes,
            "selection_s": round(getattr(cache, "selection_seconds", 0.0), 3)}


def summarize(runs: list[dict]) -> dict:
    by_variant: dict[str, list[dict]] = {}
    for run in runs:
        by_variant.setdefault(run["variant"], []).append(run)

    def median(variant, key):
        return statistics.median(run[key] for run in by_variant[variant])

    summary = {variant: {key: median(variant, key) for key in
                         ("wall_s", "cpu_s", "sys_s", "minor_faults", "peak_rss_bytes", "kv_bytes", "selection_s")}
               for variant in by_variant}
    if "plain" in by_variant:
        rounds = {}
        for run in runs:
            rounds.setdefault(run["round"], {})[run["variant"]] = run
        for variant in by_variant:
            paired = [r for r in rounds.values() if variant in r and "plain" in r]
            ratios = [r[variant]["wall_s"] / r["plain"]["wall_s"] for r in paired]
            cpu = [r[variant]["cpu_s"] / r["plain"]["cpu_s"] for r in paired]
            summary[variant]["wall_vs_plain_per_round"] = [round(x, 4) for x in ratios]
            summary[variant]["wall_vs_plain_median"] = round(statistics.median(ratios), 4)
            summary[variant]["cpu_vs_plain_median"] = round(statistics.median(cpu), 4)
    if "full" in summary and COMPRESSING in summary:
        saved = summary["full"]["kv_bytes"] - summary[COMPRESSING]["kv_bytes"]
        below = summary["full"]["peak_rss_bytes"] - summary[COMPRESSING]["peak_rss_bytes"]
        summary["memory_target"] = {"kv_bytes_saved": saved, "peak_rss_below_full": below,
                                    "share_of_saved": round(below / saved, 4) if saved else None}
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", dest="json_path", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.length, args.budget)))
        return 0
    from snapkv_cli.bench.provenance import provenance, run_start, write_result

    start = run_start()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    runs = []
    for round_index in range(args.rounds):
        order = variants[round_index % len(variants):] + variants[:round_index % len(variants)]  # take turns first
        for variant in order:
            process = subprocess.run([sys.executable, __file__, "--child", variant, "--length", str(args.length),
                                      "--budget", str(args.budget)], capture_output=True, text=True)
            if process.returncode != 0:
                sys.stderr.write(process.stderr)
                return process.returncode
            run = json.loads(process.stdout.strip().splitlines()[-1]) | {"round": round_index}
            runs.append(run)
            print(f"round {round_index}: {variant:15} wall {run['wall_s']:7.2f} s  cpu {run['cpu_s']:7.2f} s  "
                  f"sys {run['sys_s']:6.2f} s  faults {run['minor_faults']:>9}  peak RSS "
                  f"{run['peak_rss_bytes'] / 2**20:6.0f} MiB  KV {run['kv_bytes'] / 2**20:5.1f} MiB", flush=True)
    summary = summarize(runs)
    print(json.dumps(summary, indent=1))
    if args.json_path:
        write_result(args.json_path, "prefill", args, provenance(None, start), runs=runs, summary=summary)
    return 0


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def prefill_table(path: str) -> str:
    """Each variant's prefill in fresh processes, medians and the per-round ratio to
    plain transformers (wall and CPU time), recomputed from the runs."""
    report = prose.load(path)
    summary = summarize(report["runs"])
    methods = {run["variant"]: run.get("method") for run in report["runs"]}
    rows = []
    for variant, row in summary.items():
        if variant == "memory_target":
            continue
        per_round = ", ".join(prose.change(ratio) for ratio in row["wall_vs_plain_per_round"])
        rows.append([f"`{variant}`", f"`{methods[variant]}`" if methods[variant] else "-", f"{row['wall_s']:.2f}",
                     f"{row['selection_s']:.2f}", prose.change(row["wall_vs_plain_median"]), per_round,
                     prose.change(row["cpu_vs_plain_median"]), f"{row['sys_s']:.2f}",
                     f"{row['minor_faults'] / 1e6:.2f}", f"{row['peak_rss_bytes'] / 2**20:.0f}",
                     f"{row['kv_bytes'] / 2**20:.1f}"])
    return prose.table((["variant", "method", "wall s", "of which selection s", "wall vs plain (median)",
                         "wall vs plain, each round", "CPU vs plain", "sys s", "minor faults (M)", "peak RSS MiB",
                         "KV MiB"], rows))


def prefill_facts(path: str) -> dict[str, str]:
    """This bench in fresh processes: per variant (``default``, ``snapkv``) the median wall and
    CPU time against plain transformers, each round's range, its selection's share; the memory target."""
    report = prose.load(path)
    summary = summarize(report["runs"])
    methods = {run["variant"]: run.get("method") for run in report["runs"]}
    facts = {"length": f"{report['args']['length']:,}", "budget": str(report["args"]["budget"]),
             "commit": prose.commits((path,))}
    for variant, row in summary.items():
        if variant == "memory_target":
            facts |= {"rss-below-full": f"{row['peak_rss_below_full'] / 2**20:.0f} MiB",
                      "kv-saved": f"{row['kv_bytes_saved'] / 2**20:.0f} MiB",
                      "memory-share": f"{row['share_of_saved']:.0%}"}
            continue
        rounds = row["wall_vs_plain_per_round"]
        facts |= {f"{variant}-method": prose.method_ran({"method": methods[variant]}),
                  f"{variant}-wall": prose.change(row["wall_vs_plain_median"]),
                  f"{variant}-cpu": prose.change(row["cpu_vs_plain_median"]),
                  f"{variant}-rounds": f"{prose.change(min(rounds))} to {prose.change(max(rounds))}",
                  f"{variant}-round-count": str(len(rounds)),
                  f"{variant}-selection": f"{row['selection_s']:.1f} s", f"{variant}-prefill": f"{row['wall_s']:.1f} s",
                  f"{variant}-selection-share": f"{100 * row['selection_s'] / row['wall_s']:.0f}%"}
    return facts


def prefill_pooled_facts(*paths: str) -> dict[str, str]:
    """Several runs of this bench on the same variants pooled round by round: per variant the median of
    every round's wall time against plain transformers (``default-wall``), the rounds' range and count."""
    import statistics

    rounds: dict[str, list[float]] = {}
    for path in paths:
        for variant, row in summarize(prose.load(path)["runs"]).items():
            if variant != "memory_target":
                rounds.setdefault(variant, []).extend(row["wall_vs_plain_per_round"])
    facts = {}
    for variant, ratios in rounds.items():
        facts |= {f"{variant}-wall": prose.change(statistics.median(ratios)),
                  f"{variant}-rounds": f"{prose.change(min(ratios))} to {prose.change(max(ratios))}",
                  f"{variant}-round-count": str(len(ratios))}
    return facts


TABLES = {"prefill-table": prefill_table}
FACTS = {"prefill": prefill_facts, "prefill-pooled": prefill_pooled_facts}


if __name__ == "__main__":
    sys.exit(main())
