"""``compiled-step``: a whole decoding step compiled as one graph (``torch.compile``, inductor, weights frozen or
not) against the eager steps snapkv-cli runs, on the default model's compressed cache.

A compiled step needs fixed shapes, which the project's cache (its layers grow by a token a step) does not have. So
after the prefill (the CLI's default method, budget 1024: every layer and KV head keeps the same number of tokens)
the compressed keys and values are copied into transformers' ``StaticCache``, sized for the prompt's kept tokens
and every step of the run, and decoding writes each new token into its next slot: the token's rotary position is its
place in the prompt (``position_ids``), its slot in the cache is ``cache_position``, and the static cache's mask
hides the slots not written yet. Variants, each step fed the token its own last step chose:

- ``float32``, ``bf16``: what ``snapkv ask`` runs, eager, with the weights as loaded and with
  ``--decode-weights bfloat16`` (the project's cache, the model prepared as the CLI prepares it);
- ``static_float32_frozen``, ``static_bf16_frozen``: the same model and decode path on the static copy, compiled
  (``torch.compile(model)``) with inductor's freezing on: the weights are constants of the graph, which lets
  inductor prepack them;
- ``static_bf16``: the same without freezing (the weights are inputs of the graph).

Each compiled variant runs in a process of its own (one compilation per process) beside the two eager ones, in turn
within a round (the order turning with the rounds), ``--rounds`` rounds of ``--steps`` steps; a variant's step time
in a round is the median of its steps, and its ratio to ``bf16`` is taken within the round. The first compiled call
(the compilation) is timed apart: once with an empty inductor cache (``cold``: a user's first run) and once more in a
fresh process reading the cache the first left (``warm``: every later run). The tokens each variant chose are kept:
a compiled variant must choose the tokens its eager counterpart chooses.

Usage::

    .venv/bin/python -m tools.probes.decode compiled-step --length 4096 --threads 2 --rounds 4 \\
        --out docs/results/compiled_decode_probe.json
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

from tools.docs import prose
from tools.probes.decode import common

EAGER = ("float32", "bf16")
# compiled variant: (the eager variant it compiles, inductor's freezing)
COMPILED = {"static_float32_frozen": ("float32", True), "static_bf16_frozen": ("bf16", True),
            "static_bf16": ("bf16", False)}
RUNS = (("static_float32_frozen", "cold"), ("static_bf16_frozen", "cold"), ("static_bf16", "cold"),
        ("static_bf16", "warm"))
TOKENS_KEPT = 24  # tokens of each variant's first round compared and recorded


def child(argv: list[str]) -> None:
    """In this process: prefill once, then the eager variants and one compiled variant in turn: LENGTH THREADS
    VARIANT ROUNDS STEPS."""
    length, threads, variant, rounds, steps = argv
    common.result(measure(int(length), int(threads), variant, int(rounds), int(steps)))


def measure(length: int, threads: int, variant: str, rounds: int, steps: int) -> dict:
    import torch
    from transformers import StaticCache

    torch.set_num_threads(threads)
    from snapkv_cli.generation.decode_path import attach

    with common.prefilled(length) as done:
        model, cache, ids, first = done.loaded.model, done.cache, done.ids, done.first
        kept = {layer.keys.shape[2] for layer in cache.layers}
        assert len(kept) == 1, "every layer keeps as many tokens (uniform heads)"
        kept_tokens = kept.pop()
        static = StaticCache(config=model.config, max_cache_len=kept_tokens + TOKENS_KEPT + rounds * steps + 1)
        for index, layer in enumerate(cache.layers):
            static.layers[index].update(layer.keys.clone(), layer.values.clone())
        path = attach(model)
        base, freezing = COMPILED[variant]
        compiled = torch.compile(model)  # compiled at its first call, below, with the variant's freezing
        # the eager variants continue the project's cache in turn (as step-profile does), the compiled one its static
        # copy; each is fed the token its own last step chose
        state = {name: {"token": first, "done": 0, "tokens": []} for name in (*EAGER, variant)}

        def step(name: str) -> None:
            now = state[name]
            position = torch.tensor([[length + now["done"]]])
            fast = name == "bf16" or (name == variant and base == "bf16")
            with path.step() if fast else torch.no_grad():
                if name in EAGER:
                    out = model(torch.tensor([[now["token"]]]), cache=cache, position_ids=position,
                                cache_position=position[0], logits_to_keep=1)
                else:
                    out = compiled(torch.tensor([[now["token"]]]), cache=static, position_ids=position,
                                   cache_position=torch.tensor([kept_tokens + now["done"]]), logits_to_keep=1)
            now["token"], now["done"] = int(out.logits[0, -1].argmax()), now["done"] + 1
            now["tokens"].append(now["token"])

        began = time.perf_counter()
        with torch._inductor.config.patch(freezing=freezing):
            step(variant)  # compiles
        compile_s = time.perf_counter() - began
        for _ in range(TOKENS_KEPT - 1):
            step(variant)
        for _ in range(TOKENS_KEPT):  # the eager counterpart's first tokens, from the same compressed cache
            step(base)
        same_tokens = state[variant]["tokens"] == state[base]["tokens"]
        tokens = {name: list(state[name]["tokens"]) for name in (base, variant)}
        other = next(name for name in EAGER if name != base)
        step(other)  # warm-up
        per_round = []
        for round_index in range(rounds):
            names = (*EAGER, variant) if round_index % 2 == 0 else (variant, *reversed(EAGER))
            times = {}
            for name in names:
                seconds = []
                for _ in range(steps):
                    began = time.perf_counter()
                    step(name)
                    seconds.append(time.perf_counter() - began)
                times[name] = statistics.median(seconds)
            per_round.append({name: round(1000 * times[name], 2) for name in (*EAGER, variant)}
                             | {f"{variant}_vs_bf16": round(times["bf16"] / times[variant], 3)})
            print(f"round {round_index + 1}: " + ", ".join(f"{name} {1000 * times[name]:.1f} ms"
                                                           for name in (*EAGER, variant)), flush=True)
    return {"variant": variant, "compiles": base, "frozen": freezing, "compile_s": round(compile_s, 1),
            "kept_tokens": kept_tokens, "prompt_tokens": len(ids), "rounds": per_round, "tokens": tokens,
            "same_tokens_as_eager": same_tokens, "decode_path": path.describe()}


def arguments(parser) -> None:
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    common.output_arguments(parser, threads=2)


def run(args) -> None:
    started = common.start(args)
    runs = []
    with tempfile.TemporaryDirectory(prefix="inductor-") as inductor_cache:
        for variant, cache_state in RUNS:  # the warm run reads what the cold run of its variant left
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TORCHINDUCTOR_CACHE_DIR": inductor_cache}
            result = common.in_fresh_process("compiled-step", args.length, args.threads, variant, args.rounds,
                                             args.steps, env=env)
            runs.append({**result, "inductor_cache": cache_state})
            print(f"{variant} ({cache_state} cache): compiled in {result['compile_s']} s, x"
                  f"{statistics.median(r[f'{variant}_vs_bf16'] for r in result['rounds']):.2f} bf16's speed, "
                  f"same tokens: {result['same_tokens_as_eager']}", flush=True)
    summary = {}
    for run in runs:
        key = f"{run['variant']}-{run['inductor_cache']}"
        summary[key] = {"compile_s": run["compile_s"], "same_tokens_as_eager": run["same_tokens_as_eager"]}
        for name in (*EAGER, run["variant"]):
            summary[key][f"{name}_ms"] = common.min_median_max([r[name] for r in run["rounds"]])
        summary[key]["vs_bf16"] = common.min_median_max([r[f"{run['variant']}_vs_bf16"] for r in run["rounds"]])
    print(json.dumps(summary, indent=1))
    common.write(args, started, "compiled_decode_probe", runs=runs, summary=summary, kernels=True)


# -- the docs' tables and facts from its JSON (tools.docs.tables) ---------------------------------------------------

def compiled_decode_table(path: str) -> str:
    """Per compiled variant and inductor cache, its compile time, step times
    (median of the rounds) next to the eager steps of the same process, its speed against the eager bfloat16 steps
    (median, min-max of the rounds) and whether it chose the eager steps' tokens."""
    report = prose.load(path)
    rows = []
    for run in report["runs"]:
        variant = run["variant"]
        median = {name: statistics.median(r[name] for r in run["rounds"]) for name in ("float32", "bf16", variant)}
        ratios = [r[f"{variant}_vs_bf16"] for r in run["rounds"]]
        rows.append([f"`{variant}`", run["inductor_cache"], f"{run['compile_s']:.0f} s",
                     f"{median['float32']:.1f}", f"{median['bf16']:.1f}", f"{median[variant]:.1f}",
                     f"{prose.times(statistics.median(ratios))} ({prose.span(min(ratios), max(ratios))})",
                     "yes" if run["same_tokens_as_eager"] else "no"])
    return prose.table((["compiled variant", "inductor cache", "compiling", "eager float32 ms", "eager bf16 ms",
                         "compiled ms", "vs eager bf16", "same tokens"], rows))


TABLES = {"compiled-decode": compiled_decode_table}
