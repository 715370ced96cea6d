"""``kernels``: which CPU kernel multiplies fastest on this host: one-token products ``x (1 x K) @ W.T`` and
prefill-size products.

For each weight shape, every variant runs in turn within a round (so a busy machine slows them alike), ``--rounds``
rounds; a variant's time in a round is the median of ``--calls`` calls after one warm-up call, and its ratio to
float32 is taken within the same round. Variants:

- ``float32``: ``F.linear`` in float32 (oneDNN / MKL, whatever torch picks);
- ``bf16_onednn``: bfloat16 weight and activation, torch's default dispatch (oneDNN where torch uses it);
- ``bf16_no_onednn``: the same under ``torch.backends.mkldnn.flags(enabled=False)`` (torch's own bf16 kernels);
- ``int8_bf16``: ``torch.ops.aten._weight_int8pack_mm`` (int8 weight, one scale per output row), bf16 activations;
- ``int8_f32``: the same operator with float32 activations;
- ``int4_bf16``, ``int4_f32``: ``torch.ops.aten._weight_int4pack_mm_for_cpu`` (4-bit weight packed by
  ``_convert_weight_to_int4pack_for_cpu``, a scale and offset per group of :data:`INT4_GROUP` columns of a row),
  with bfloat16 and float32 activations: a quarter of bfloat16's bytes.

The JSON records the CPU's vector features (``/proc/cpuinfo``) and the load average before and after, with the
rest of the provenance.

Usage::

    .venv/bin/python -m tools.probes.decode kernels --threads 1 --rounds 5 --out docs/results/kernel_probe.json
"""

from __future__ import annotations

import statistics
import time

from tools.docs import prose
from tools.probes.decode import common

# (rows N, columns K): one MLP matrix of the default model, its output projection, gemma3-270m's output projection
DECODE_SHAPES = ((1536, 576), (49152, 576), (262144, 640))
# prefill-size products: (tokens M, N, K), the default model's MLP and attention projections over a prefill chunk
PREFILL_SHAPES = ((512, 1536, 576), (512, 576, 576), (2048, 1536, 576))
# the small matrices again, cycling over distinct copies (about 220 MB in float32, far past the 32 MB L3 measured
# here): in a decode step the weights stream from memory, while one matrix called again stays in the cache
COLD_SHAPES = ((1536, 576, 64), (576, 576, 160))
DECODE_VARIANTS = ("float32", "bf16_onednn", "bf16_no_onednn", "int8_bf16", "int8_f32", "int4_bf16", "int4_f32")
INT4_GROUP = 32  # columns sharing one scale and offset (llama.cpp's Q4_1 blocks are 32 wide too)
PREFILL_VARIANTS = ("float32", "bf16_onednn", "bf16_no_onednn")


def _quantize_rows(weight):
    import torch

    scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
    q = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


def _quantize_groups(weight):
    """``weight`` (rows x k) as 4-bit codes 0-15 packed for the CPU's int4 op, and its (k / group, rows, 2) scales
    and offsets: a value is ``(code - 8) * scale + offset``, min-max per group of :data:`INT4_GROUP` columns."""
    import torch

    rows, k = weight.shape
    groups = weight.view(rows, k // INT4_GROUP, INT4_GROUP)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scales = ((high - low) / 15).clamp(min=1e-8)
    codes = ((groups - low[..., None]) / scales[..., None]).round().clamp(0, 15).to(torch.int32).view(rows, k)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    return packed, torch.stack([scales.t(), (low + 8 * scales).t()], dim=-1).contiguous()


def make_calls(rows: int, k: int, m: int, variants: tuple[str, ...], copies: int = 1) -> dict:
    """A zero-argument function per variant computing ``x (m x k) @ W.T`` for random ``W`` (rows x k).

    With ``copies`` > 1 each call takes the next of that many distinct weights, so the weights come from memory
    rather than the CPU's caches, as they do in a decode step (a model's weights are far larger than its caches)."""
    import itertools

    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=generator)
    x16 = x.to(torch.bfloat16)
    weights = [torch.randn(rows, k, generator=generator) * 0.02 for _ in range(copies)]
    calls = {}

    def cycled(prepared, fn):
        cycle = itertools.cycle(prepared)
        return lambda: fn(next(cycle))

    if "float32" in variants:
        calls["float32"] = cycled(weights, lambda w: F.linear(x, w))
    if {"bf16_onednn", "bf16_no_onednn"} & set(variants):
        w16 = [w.to(torch.bfloat16) for w in weights]
        calls["bf16_onednn"] = cycled(w16, lambda w: F.linear(x16, w))

        def no_onednn(w):
            with torch.backends.mkldnn.flags(enabled=False):
                return F.linear(x16, w)
        calls["bf16_no_onednn"] = cycled(w16, no_onednn)
    if {"int8_bf16", "int8_f32"} & set(variants):
        packed = [_quantize_rows(w) for w in weights]
        p16 = [(q, s.to(torch.bfloat16)) for q, s in packed]
        calls["int8_bf16"] = cycled(p16, lambda p: torch.ops.aten._weight_int8pack_mm(x16, p[0], p[1]))
        calls["int8_f32"] = cycled(packed, lambda p: torch.ops.aten._weight_int8pack_mm(x, p[0], p[1]))
    if {"int4_bf16", "int4_f32"} & set(variants):
        packed4 = [_quantize_groups(w) for w in weights]
        calls["int4_bf16"] = cycled([(q, z.to(torch.bfloat16)) for q, z in packed4], lambda p: torch.ops.aten.
                                    _weight_int4pack_mm_for_cpu(x16, p[0], INT4_GROUP, p[1]))
        calls["int4_f32"] = cycled(packed4, lambda p: torch.ops.aten._weight_int4pack_mm_for_cpu(
            x, p[0], INT4_GROUP, p[1]))
    return {name: calls[name] for name in variants}


def time_calls(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def probe(shape_label: str, calls_by_variant: dict, rounds: int, calls: int) -> dict:
    per_round: dict[str, list[float]] = {name: [] for name in calls_by_variant}
    ratio: dict[str, list[float]] = {name: [] for name in calls_by_variant}
    for _ in range(rounds):
        times = {name: time_calls(fn, calls) for name, fn in calls_by_variant.items()}
        for name, seconds in times.items():
            per_round[name].append(seconds)
            ratio[name].append(times["float32"] / seconds)
    summary = {}
    for name in calls_by_variant:
        ms = sorted(1000 * s for s in per_round[name])
        speedup = sorted(ratio[name])
        summary[name] = {"ms_min": round(ms[0], 4), "ms_median": round(statistics.median(ms), 4),
                         "ms_max": round(ms[-1], 4), "speedup_vs_float32_min": round(speedup[0], 3),
                         "speedup_vs_float32_median": round(statistics.median(speedup), 3),
                         "speedup_vs_float32_max": round(speedup[-1], 3)}
    line = "  ".join(f"{name} {v['ms_median']:.3f}ms x{v['speedup_vs_float32_median']:.2f}"
                     f" ({v['speedup_vs_float32_min']:.2f}-{v['speedup_vs_float32_max']:.2f})"
                     for name, v in summary.items())
    print(f"{shape_label}: {line}", flush=True)
    return summary


def arguments(parser) -> None:
    """The options of a measurement of products: threads and JSON, rounds, calls per variant per round."""
    common.output_arguments(parser)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=9, help="calls per variant per round (the median is kept)")


def run(args) -> None:
    started = common.start(args)
    import torch

    decode = {}
    for rows, k in DECODE_SHAPES:
        label = f"1x{k} @ {rows}x{k}.T"
        decode[label] = probe(label, make_calls(rows, k, 1, DECODE_VARIANTS), args.rounds, args.calls)
    for rows, k, copies in COLD_SHAPES:
        label = f"1x{k} @ {rows}x{k}.T, {copies} distinct weights in turn"
        decode[label] = probe(label, make_calls(rows, k, 1, DECODE_VARIANTS, copies), args.rounds,
                              args.calls * copies)
    prefill = {}
    for m, rows, k in PREFILL_SHAPES:
        label = f"{m}x{k} @ {rows}x{k}.T"
        prefill[label] = probe(label, make_calls(rows, k, m, PREFILL_VARIANTS), args.rounds, args.calls)
    common.write(args, started, "kernel_probe", kernels=True, mkldnn_available=torch.backends.mkldnn.is_available(),
                 decode=decode, prefill=prefill)


# -- the docs' tables and facts from its JSON (tools.docs.tables) ---------------------------------------------------

KERNEL_VARIANTS = {"float32": "float32", "bf16_onednn": "bf16, oneDNN on", "bf16_no_onednn": "bf16, oneDNN off",
                   "int8_bf16": "int8 op, bf16 x", "int8_f32": "int8 op, float32 x", "int4_bf16": "int4 op, bf16 x",
                   "int4_f32": "int4 op, float32 x"}


COMPILED_VARIANTS = {"float32": "float32", "bf16": "bf16", "float32_compiled": "float32, compiled",
                     "bf16_compiled": "bf16, compiled", "float32_autotune": "float32, compiled, max-autotune",
                     "float32_autotune_unfrozen": "float32, max-autotune, not frozen",
                     "float32_cpp_template": "float32, C++ template only"}


def kernel_probe_table(path: str) -> str:
    """This measurement's or ``compiled-kernels``': each product's milliseconds per call per kernel
    (median of the rounds) and its speed against float32 within each round (median, min-max); the one-token
    products first, then prefill-size ones; a kernel that did not compile, its error."""
    report = prose.load(path)
    variants = COMPILED_VARIANTS if report["kind"] == "compiled_probe" else KERNEL_VARIANTS

    def cell(shape: str, row: dict, variant: str) -> str:
        if variant not in row:
            return f"did not compile: {report['failed'][shape][variant]}" if variant in report.get(
                "failed", {}).get(shape, {}) else ""
        value = row[variant]
        if variant == "float32":
            return f"{value['ms_median']:.3g} ms"
        return (f"{value['ms_median']:.3g} ms, x{value['speedup_vs_float32_median']:.2f} "
                f"({value['speedup_vs_float32_min']:.2f}-{value['speedup_vs_float32_max']:.2f})")

    rows = [[f"`{shape}`", *[cell(shape, row, variant) for variant in variants]]
            for block in ("decode", "prefill") for shape, row in report.get(block, {}).items()]
    return prose.table((["product (x @ W.T)", *variants.values()], rows))


def kernel_probe_facts(path: str) -> dict[str, str]:
    """Where it ran (CPUs, vector features, bfloat16, torch, threads, load), its rounds."""
    report = prose.load(path)
    facts = {"rounds": str(report["args"]["rounds"]), **prose.machine_facts(report["provenance"])}
    gemma = report["decode"].get("1x640 @ 262144x640.T", {})
    if "int4_bf16" in gemma:  # runs from before the int4 columns have none
        ms = {name: row["ms_median"] for name, row in gemma.items()}
        facts["int4-gemma"] = (
            f"On gemma3-270m's 262,144 x 640 output projection it took {ms['int4_bf16']:.3g} ms with bfloat16 "
            f"activations, against {min(ms['bf16_onednn'], ms['bf16_no_onednn']):.3g} ms for the faster bfloat16 "
            f"kernel and {ms['float32']:.3g} ms in float32 ({ms['int4_f32']:.3g} ms with float32 activations).")
    return facts


TABLES = {"kernel-probe": kernel_probe_table, "compiled-probe": kernel_probe_table}
FACTS = {"kernel-probe": kernel_probe_facts, "compiled-probe": kernel_probe_facts}
