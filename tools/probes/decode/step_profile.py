"""``step-profile``: one decoding step of the default model, float32 against ``--decode-weights bfloat16``, timed
and profiled per op.

Prefills LENGTH tokens of prose once with the default method (budget 1024), then decodes from that compressed cache
in rounds: in each round ``--steps`` steps with the weights as loaded, then ``--steps`` with the bfloat16 decode
path (the order turning with the rounds), each step fed the token the step before chose (so both variants append
to the same cache and read about the same number of keys). The ratio of the two step times is taken within each
round. Then ``torch.profiler`` records ``--profile-steps`` steps of each variant and the JSON keeps each op's self
CPU time per step (the top ``--top`` ops).

Usage::

    .venv/bin/python -m tools.probes.decode step-profile --length 4096 --threads 1 --rounds 5 \\
        --out docs/results/decode_step_profile.json
"""

from __future__ import annotations

import statistics
import time

from tools.docs import prose
from tools.probes.decode import common


def arguments(parser) -> None:
    parser.add_argument("--model", default=None, help="a built-in model (default: the default model)")
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--profile-steps", type=int, default=8)
    parser.add_argument("--top", type=int, default=12)
    common.output_arguments(parser)


def run(args) -> None:
    started = common.start(args)
    import torch

    from snapkv_cli.generation.decode_path import attach, detach

    with common.prefilled(args.length, args.model) as done:
        model, cache = done.loaded.model, done.cache
        position, token = [len(done.ids)], [done.first]
        path = attach(model)

        def step(fast: bool) -> None:
            where = torch.tensor([[position[0]]])
            with path.step() if fast else torch.no_grad():
                out = model(torch.tensor([[token[0]]]), cache=cache, position_ids=where, cache_position=where[0],
                            use_cache=True)
            token[0], position[0] = int(out.logits[0, -1].argmax()), position[0] + 1

        def timed(fast: bool, steps: int) -> float:
            began = time.perf_counter()
            for _ in range(steps):
                step(fast)
            return (time.perf_counter() - began) / steps

        step(False), step(True)  # warm-up
        per_round = []
        for round_index in range(args.rounds):
            order = (False, True) if round_index % 2 == 0 else (True, False)
            times = {fast: timed(fast, args.steps) for fast in order}
            per_round.append({"float32_ms": round(1000 * times[False], 2), "bf16_ms": round(1000 * times[True], 2),
                              "speedup": round(times[False] / times[True], 3)})
            print(f"round {round_index + 1}: float32 {1000 * times[False]:.1f} ms/step, bfloat16 steps "
                  f"{1000 * times[True]:.1f} ms/step, x{times[False] / times[True]:.2f}", flush=True)
        profiles = {}
        for name, fast in (("float32", False), ("bf16_steps", True)):
            profiles[name] = common.profiled(lambda fast=fast: step(fast), args.profile_steps, args.top)
            print(f"{name}: " + ", ".join(f"{op['op']} {op['self_ms_per_step']:.1f} ms"
                                          for op in profiles[name]["ops"][:6]), flush=True)
        kept_keys = cache.get_seq_length()
        copied = path.copied_bytes
        detach(model)
    summary = step_summary(per_round)
    print(summary)
    common.write(args, started, "decode_step_profile", done.loaded, prompt_tokens=len(done.ids),
                 prefill_s=round(done.prefill_s, 2), cache_positions=kept_keys, bf16_copy_bytes=copied,
                 decode_path=path.describe(), rounds=per_round, summary=summary, profiles=profiles)


# -- the docs' tables and facts from its JSON (tools.docs.tables) ---------------------------------------------------

def decode_step_profile_table(path: str) -> str:
    """The ops that take a decoding step's time, float32 against bfloat16 steps
    (torch.profiler, self CPU time per step): the six largest in either, and all ops."""
    report = prose.load(path)
    profiles = report["profiles"]
    ops: dict[str, dict] = {}
    for name, profile in profiles.items():
        for op in profile["ops"]:
            ops.setdefault(op["op"], {})[name] = op["self_ms_per_step"]
    top = sorted(ops, key=lambda op: -max(ops[op].values()))[:6]
    rows = [[f"`{op}`", *[f"{ops[op][name]:.1f}" if name in ops[op] else "-" for name in profiles]] for op in top]
    rows.append(["all ops (self CPU time)", *[f"{profile['self_cpu_ms_per_step']:.1f}" for profile in
                                             profiles.values()]])
    return prose.table((["op (ms per step)", *profiles], rows))


def step_summary(rounds: list[dict]) -> dict:
    """The decode step profile's summary, recomputed from its paired rounds (as :func:`run` stores it)."""
    speedups = sorted(row["speedup"] for row in rounds)
    return {"speedup_median": statistics.median(speedups), "speedup_min": speedups[0], "speedup_max": speedups[-1],
            "float32_ms_median": statistics.median(row["float32_ms"] for row in rounds),
            "bf16_ms_median": statistics.median(row["bf16_ms"] for row in rounds)}


def decode_step_profile_facts(path: str) -> dict[str, str]:
    """The prompt and the cache after the steps, the paired rounds' step times and
    speed-up (recomputed from the rounds), the matrix products' and all ops' time against float32 in the profile
    (``mm``, ``all-ops``), the products per step, the bfloat16 copies' bytes, where it ran."""
    report = prose.load(path)
    summary, profiles = step_summary(report["rounds"]), report["profiles"]
    mm = {name: next(op for op in profile["ops"] if op["op"] == "aten::mm") for name, profile in profiles.items()}
    every = {name: profile["self_cpu_ms_per_step"] for name, profile in profiles.items()}
    return {"prompt-tokens": f"{report['prompt_tokens']:,}", "cache-positions": f"{report['cache_positions']:,}",
            "rounds": str(len(report["rounds"])), "steps": str(report["args"]["steps"]),
            "float32-ms": f"{summary['float32_ms_median']:.0f} ms", "bf16-ms": f"{summary['bf16_ms_median']:.0f} ms",
            "speedup": prose.span(summary["speedup_min"], summary["speedup_max"]),
            "speedup-median": prose.times(summary["speedup_median"]),
            "mm": f"{mm['float32']['self_ms_per_step'] / mm['bf16_steps']['self_ms_per_step']:.1f}x",
            "mm-calls": f"{mm['bf16_steps']['calls_per_step']:.0f}",
            "all-ops": f"{every['float32'] / every['bf16_steps']:.1f}x",
            "copies": f"{report['bf16_copy_bytes'] / 1e6:.0f} MB", **prose.machine_facts(report["provenance"])}


TABLES = {"decode-step-profile": decode_step_profile_table}
FACTS = {"decode-step-profile": decode_step_profile_facts}


def stored_summary(report: dict) -> str | None:
    """A decode step profile's stored summary against its recomputation from its rounds."""
    return "stored summary differs from the rounds" if report["summary"] != step_summary(report["rounds"]) \
        else None


CHECKS = {"decode_step_profile": stored_summary}
