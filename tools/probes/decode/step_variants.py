"""``step-variants``: what a decoding step runs with each ``--decode-weights`` value and two other routes: paired
rounds, per-op profiles.

Prefills LENGTH tokens of prose once with the default method (budget 1024), then decodes from that compressed cache
in rounds, every variant in turn (the order turning with the rounds, its decode path attached before its clock
starts), ``--steps`` steps each, each step fed the token the step before chose:

- ``float32``: the weights as loaded (``--decode-weights same``);
- ``bf16``: ``--decode-weights bfloat16`` as ``snapkv ask`` runs it;
- ``int4``: ``--decode-weights int4`` (4-bit codes where the weights are 4-bit blocks, the packs of layers reading
  one input as one product; ``snapkv_cli.generation.decode_path``);
- ``matmul-attention``: ``bf16`` with a step's attention (one query, no mask) as two matrix products and a softmax
  per KV head instead of PyTorch's CPU flash kernel;
- ``compiled-layers`` (last, with ``--compile``): ``bf16`` with every decoder layer compiled by ``torch.compile``
  (``nn.Module.compile``, dynamic shapes: one compilation the layers share); the compile time is recorded.

Before the rounds, every variant computes one step from the same cache state (cropped back after each), so the JSON
says whether its greedy token matches float32's and how far its logits are from float32's. Then ``torch.profiler``
records ``--profile-steps`` steps of each variant (self CPU time per op).

Usage::

    .venv/bin/python -m tools.probes.decode step-variants --length 4096 --threads 2 --rounds 5 --compile \\
        --out docs/results/decode_step_variants.json
"""

from __future__ import annotations

import contextlib
import statistics
import time

from tools.docs import prose
from tools.probes.decode import common

VARIANTS = ("float32", "bf16", "int4", "matmul-attention")
# the --decode-weights value each variant's steps run (float32: none, the weights as loaded)
DECODE_WEIGHTS = {"bf16": "bfloat16", "int4": "int4", "matmul-attention": "bfloat16", "compiled-layers": "bfloat16"}


def install_matmul_attention(state: dict, calls: list[int]):
    """Replace transformers' sdpa attention function with one that, under ``state["matmul"]``, computes a one-query
    step without a mask as two products per KV head; returns a function that restores the original."""
    import torch
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        if not (state.get("matmul") and query.shape[2] == 1 and attention_mask is None):
            return sdpa(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        calls[0] += 1
        batch, heads, _, head_dim = query.shape
        kv_heads = key.shape[1]
        grouped = query.reshape(batch, kv_heads, heads // kv_heads, head_dim)
        logits = torch.matmul(grouped, key.transpose(-1, -2)) * (scaling or head_dim ** -0.5)
        out = torch.matmul(torch.softmax(logits, dim=-1), value)
        return out.reshape(batch, heads, 1, head_dim).transpose(1, 2), None

    ALL_ATTENTION_FUNCTIONS["sdpa"] = attention
    return lambda: ALL_ATTENTION_FUNCTIONS.__setitem__("sdpa", sdpa)


def arguments(parser) -> None:
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--profile-steps", type=int, default=8)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--compile", action="store_true", help="add the compiled-layers variant (measured last)")
    common.output_arguments(parser, threads=2)


def run(args) -> None:
    started = common.start(args)
    import torch

    from snapkv_cli.generation.decode_path import attach, attached_path, detach

    state: dict = {}
    matmul_calls = [0]
    restore = install_matmul_attention(state, matmul_calls)
    variants = list(VARIANTS)
    with common.prefilled(args.length) as done:
        model, cache = done.loaded.model, done.cache
        layers = model.model.layers
        token, position = [done.first], [len(done.ids)]
        compiled: dict = {}
        paths: dict = {}

        def prepared(variant: str):
            """The decode path the variant's steps run (None: the weights as loaded), attached now."""
            state["matmul"] = variant == "matmul-attention"
            for layer in layers:  # compiled or not, as the variant says
                layer._compiled_call_impl = compiled.get(layer) if variant == "compiled-layers" else None
            if variant not in DECODE_WEIGHTS:
                detach(model)
                return None
            weights = DECODE_WEIGHTS[variant]
            fresh = attached_path(model) is None or attached_path(model).weights != weights
            began = time.perf_counter()
            path = attach(model, weights=weights)
            info = paths.setdefault(weights, {"describe": path.describe(), "bytes": path.copied_bytes,
                                              "attach_s": []})
            if fresh:  # the copies or codes made now, not a path already attached
                info["attach_s"].append(round(time.perf_counter() - began, 3))
            return path

        def step(path):
            where = torch.tensor([[position[0]]])
            with path.step() if path is not None else contextlib.nullcontext():
                out = model(torch.tensor([[token[0]]]), cache=cache, position_ids=where, cache_position=where[0],
                            use_cache=True).logits[0, -1]
            token[0], position[0] = int(out.argmax()), position[0] + 1
            return out

        agreement = {}
        length, fed = cache.get_seq_length(), (token[0], position[0])
        reference = None
        for variant in variants:
            out = step(prepared(variant))
            reference = out if reference is None else reference
            agreement[variant] = {"same_token_as_float32": int(out.argmax()) == int(reference.argmax()),
                                  "largest_logit_difference": round(float((out - reference).abs().max()), 4)}
            cache.crop(length - cache.get_seq_length())  # transformers crops by a negative count
            token[0], position[0] = fed
        compile_s = None
        if args.compile:
            path = prepared("bf16")
            began = time.perf_counter()
            for layer in layers:
                layer.compile(dynamic=True)
                compiled[layer] = layer._compiled_call_impl
            variants.append("compiled-layers")
            step(prepared("compiled-layers"))
            compile_s = round(time.perf_counter() - began, 1)

        def timed(variant: str) -> float:
            path = prepared(variant)
            step(path)  # warm-up
            began = time.perf_counter()
            for _ in range(args.steps):
                step(path)
            return 1000 * (time.perf_counter() - began) / args.steps

        rounds = []
        for index in range(args.rounds):
            order = variants if index % 2 == 0 else variants[::-1]
            times = {variant: timed(variant) for variant in order}
            rounds.append({variant: round(times[variant], 2) for variant in variants})
            print(f"round {index + 1}: " + ", ".join(f"{v} {times[v]:.1f} ms" for v in variants), flush=True)
        profiles = {}
        for variant in variants:
            path = prepared(variant)
            profiles[variant] = common.profiled(lambda path=path: step(path), args.profile_steps, args.top)
        cache_positions = cache.get_seq_length()
        for layer in layers:
            layer._compiled_call_impl = None
        detach(model)
    restore()
    summary = {}
    for variant in variants:
        ratios = sorted(row["bf16"] / row[variant] for row in rounds)
        summary[variant] = {"ms_median": statistics.median(row[variant] for row in rounds),
                            "vs_bf16_median": round(statistics.median(ratios), 3),
                            "vs_bf16_min": round(ratios[0], 3), "vs_bf16_max": round(ratios[-1], 3)}
        print(f"{variant}: {summary[variant]}")
    common.write(args, started, "decode_step_variants", done.loaded, prompt_tokens=len(done.ids),
                 prefill_s=round(done.prefill_s, 2), cache_positions=cache_positions, decode_paths=paths,
                 matmul_attention_calls=matmul_calls[0], compile_s=compile_s, agreement=agreement, rounds=rounds,
                 summary=summary, profiles=profiles)


# -- the docs' tables and facts from its JSON (tools.docs.tables) ---------------------------------------------------

def decode_step_variants_table(path: str) -> str:
    """Per variant of a decoding step, its milliseconds per step (median of the
    rounds), its speed against the bfloat16 steps (median, min-max of the paired rounds), its three costliest ops
    (self CPU milliseconds per step) and whether one step from the same cache chose float32's token."""
    report = prose.load(path)
    rows = []
    for variant, summary in report["summary"].items():
        ops = report["profiles"][variant]["ops"][:3]
        agreement = report["agreement"].get(variant)
        against = prose.span(summary["vs_bf16_min"], summary["vs_bf16_max"])
        rows.append([f"`{variant}`", f"{summary['ms_median']:.1f}",
                     f"{prose.times(summary['vs_bf16_median'])} ({against})",
                     ", ".join(f"`{op['op'].removeprefix('aten::')}` {op['self_ms_per_step']:.1f}" for op in ops),
                     "-" if agreement is None else ("yes" if agreement["same_token_as_float32"] else "no")])
    return prose.table((["decoding step", "ms per step", "vs bf16 steps", "costliest ops (ms per step)",
                         "float32's token"], rows))


def decode_step_variants_facts(path: str) -> dict[str, str]:
    """The bytes of each decode path's weights (``bf16-bytes``, ``int4-bytes``) and
    the seconds making them took each time (``bf16-attach``), the compile time of the compiled layers, the prompt
    and cache size, the rounds and the machine."""
    report = prose.load(path)
    names = {"bfloat16": "bf16", "int4": "int4"}
    facts = {"prompt-tokens": f"{report['prompt_tokens']:,}", "cache-positions": f"{report['cache_positions']:,}",
             "rounds": str(report["args"]["rounds"])}
    for weights, path_info in report["decode_paths"].items():
        facts[f"{names[weights]}-bytes"] = f"{path_info['bytes'] / 1e6:.0f} MB"
        times = path_info["attach_s"]
        facts[f"{names[weights]}-attach"] = f"{min(times):.1f}-{max(times):.1f} s"
    if report.get("compile_s") is not None:
        facts["compile"] = f"{report['compile_s']:.0f} s"
    return facts | prose.machine_facts(report["provenance"])


TABLES = {"decode-step-variants": decode_step_variants_table}
FACTS = {"decode-step-variants": decode_step_variants_facts}
