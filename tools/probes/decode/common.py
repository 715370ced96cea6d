"""What the decode probe's measurements share: the run's start and its JSON, the default model's compressed cache
after a prefill of prose, a step's per-op profile, a measurement in a fresh process of its own, and a spread."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def output_arguments(parser: argparse.ArgumentParser, threads: int | None = 1) -> None:
    """The options every measurement takes: its torch threads (None: torch's own) and its JSON."""
    parser.add_argument("--threads", type=int, default=threads, help="torch intra-op threads")
    parser.add_argument("--out", type=Path, help="write the results with their provenance to this JSON file")


def start(args: argparse.Namespace) -> dict:
    """The run's start (its load and time, for the provenance), torch set to ``args.threads``; prints the threads,
    whether the CPU computes bfloat16 natively and the load."""
    from snapkv_cli.bench.provenance import run_start

    started = run_start()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from snapkv_cli.models.cpu_features import native_bf16_feature

    print(f"threads {torch.get_num_threads()}, native bf16: {native_bf16_feature()}, "
          f"load {started['load_average_before']}", flush=True)
    return started


def write(args: argparse.Namespace, started: dict, kind: str, loaded=None, *, kernels: bool = False, **body) -> None:
    """The measurement's JSON at ``args.out`` (none without it), with its provenance; ``kernels``: also the CPU's
    native bfloat16 and torch's CPU capability, which pick the kernels."""
    if not args.out:
        return
    from snapkv_cli.bench.provenance import provenance, write_result

    if kernels:
        import torch

        from snapkv_cli.models.cpu_features import native_bf16_feature

        body = {"native_bf16": native_bf16_feature(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                **body}
    write_result(args.out, kind, args, provenance(loaded, started), **body)


@dataclass
class Prefilled:
    """The default model after a prefill of prose with the default method at budget 1024, as ``snapkv ask`` runs it."""

    loaded: object
    ids: list[int]
    cache: object  # the compressed SnapKVCache
    first: int  # the token the prefill chose
    prefill_s: float


@contextlib.contextmanager
def prefilled(length: int, model: str | None = None) -> Iterator[Prefilled]:
    """``length`` tokens of prose prefilled into the default method's compressed cache (budget 1024), inside the
    engine's hooks and torch's inference mode, where the caller decodes from it."""
    import torch

    from snapkv_cli.bench.grid import MethodGrid, default_label
    from snapkv_cli.bench.speed import prose_ids
    from snapkv_cli.engine import SnapKVCache, attached
    from snapkv_cli.generation import prefill
    from snapkv_cli.models.loader import load_model

    loaded = load_model(model, device="cpu", dtype="float32")
    ids = prose_ids(loaded.tokenizer, length)
    cache = SnapKVCache(settings=MethodGrid().settings(default_label(), 1024), config=loaded.model.config)
    with attached(loaded.model), torch.inference_mode():
        began = time.perf_counter()
        logits = prefill(loaded.model, ids, cache)
        yield Prefilled(loaded, ids, cache, int(logits.argmax()), time.perf_counter() - began)


def profiled(step, steps: int, top: int) -> dict:
    """``steps`` calls of ``step`` under ``torch.profiler``: the self CPU milliseconds per step, and the ``top`` ops by
    self CPU time with their calls and milliseconds per step and their share."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = sorted(prof.key_averages(), key=lambda event: event.self_cpu_time_total, reverse=True)
    total = sum(event.self_cpu_time_total for event in events)
    return {"self_cpu_ms_per_step": round(total / 1000 / steps, 2),
            "ops": [{"op": event.key, "calls_per_step": event.count / steps,
                     "self_ms_per_step": round(event.self_cpu_time_total / 1000 / steps, 3),
                     "share": round(event.self_cpu_time_total / total, 4)} for event in events[:top]]}


CHILD = "--child"  # the first argument after a subcommand that runs one measurement in this process


def in_fresh_process(subcommand: str, *values, env: dict | None = None) -> dict:
    """One measurement of ``subcommand`` in a process of its own (``python -m tools.probes.decode SUBCOMMAND --child
    VALUES...``): what it printed on its ``RESULT`` line."""
    done = subprocess.run([sys.executable, "-m", "tools.probes.decode", subcommand, CHILD, *map(str, values)],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{subcommand} {' '.join(map(str, values))} failed:\n{done.stderr[-3000:]}")
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])


def result(value: dict) -> None:
    """A child's measurement, as :func:`in_fresh_process` reads it."""
    print("RESULT " + json.dumps(value), flush=True)


def min_median_max(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}
