"""``lm-head``: where a decode step's time goes with a large vocabulary: the output projection (lm_head) against
the rest.

Prefills LENGTH tokens of prose with SnapKV (budget 1024) through ``generate_answer``, decoding ``--new-tokens``
tokens; forward hooks on the model's ``lm_head`` time the output projection inside each decode step. Also times
the projection alone in float32 and bfloat16 on the same hidden state (what a lower-precision head would save),
and checks that the prefill asks for the last position's logits only.

Usage::

    .venv/bin/python -m tools.probes.decode lm-head --model gemma3-270m --length 1024 --new-tokens 32 --threads 1 \
        --out docs/results/decode_profile.json
"""

from __future__ import annotations

import json
import time

from tools.docs import prose
from tools.probes.decode import common


def arguments(parser) -> None:
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=32)
    common.output_arguments(parser, threads=None)


def run(args) -> None:
    begun = common.start(args)
    from snapkv_cli.generation.allocator import return_freed_memory_to_os

    return_freed_memory_to_os()
    import torch

    from snapkv_cli.bench.speed import prose_ids
    from snapkv_cli.engine import CompressionSettings
    from snapkv_cli.generation import GenerationOptions, generate_answer
    from snapkv_cli.models.catalog import default_prefill_chunk
    from snapkv_cli.models.loader import load_model

    loaded = load_model(args.model, device="cpu")
    model = loaded.model
    head_times: list[float] = []
    head_rows: list[int] = []
    started: list[float] = []
    model.lm_head.register_forward_pre_hook(lambda module, inputs: started.append(time.perf_counter()))

    def after(module, inputs, output):
        head_times.append(time.perf_counter() - started[-1])
        head_rows.append(inputs[0].shape[1])

    model.lm_head.register_forward_hook(after)
    ids = prose_ids(loaded.tokenizer, args.length)
    settings = CompressionSettings(method="snapkv", window_size=32, max_capacity_prompt=1024, kernel_size=15,
                                   pooling="maxpool")
    result = generate_answer(model, loaded.tokenizer, ids, settings,
                             GenerationOptions(max_new_tokens=args.new_tokens, stop_at_eos=False,
                                               prefill_chunk=default_prefill_chunk(loaded.name, model.config)))
    prefill_heads = head_rows[:-result.decode_steps] if result.decode_steps else head_rows
    decode_heads = head_times[-result.decode_steps:] if result.decode_steps else []
    step_s = result.decode_s / max(result.decode_steps, 1)
    head_s = sum(decode_heads) / max(len(decode_heads), 1)

    hidden = torch.randn(1, 1, model.config.get_text_config().hidden_size)
    weight = model.lm_head.weight

    def timed(fn, repeats: int = 20) -> float:
        fn()
        begin = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - begin) / repeats

    with torch.inference_mode():
        alone_f32 = timed(lambda: torch.nn.functional.linear(hidden, weight))
        weight_bf16, hidden_bf16 = weight.to(torch.bfloat16), hidden.to(torch.bfloat16)
        alone_bf16 = timed(lambda: torch.nn.functional.linear(hidden_bf16, weight_bf16))
    report = {
        "model": loaded.name, "vocab": int(weight.shape[0]), "hidden": int(weight.shape[1]),
        "prompt_tokens": args.length, "decode_steps": result.decode_steps,
        "decode_tokens_per_s": round(result.decode_tokens_per_s, 2),
        "step_ms": round(step_s * 1000, 1), "lm_head_ms_in_step": round(head_s * 1000, 1),
        "lm_head_share": round(head_s / step_s, 3) if step_s else None,
        "prefill_lm_head_rows": sorted(set(prefill_heads)),  # [1]: logits for the last position only
        "lm_head_alone_float32_ms": round(alone_f32 * 1000, 1),
        "lm_head_alone_bfloat16_ms": round(alone_bf16 * 1000, 1),
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(report))
    common.write(args, begun, "decode_profile", loaded, report=report)


# -- the docs' tables and facts from its JSON (tools.docs.tables) ---------------------------------------------------

def decode_profile_facts(path: str) -> dict[str, str]:
    """The output projection's share of a decode step with a large vocabulary."""
    result = prose.load(path)
    run = result["report"]
    return {
        "model": run["model"], "vocab": f"{run['vocab']:,}", "hidden": str(run["hidden"]),
        "prompt-tokens": f"{run['prompt_tokens']:,}", "threads": str(run["torch_threads"]),
        "commit": f"`{result['provenance']['git']['commit'][:10]}`", "step": f"{run['step_ms']:.0f} ms",
        "decode": f"{run['decode_tokens_per_s']:.1f} tokens/s", "lm-head": f"{run['lm_head_ms_in_step']:.0f} ms",
        "lm-head-share": f"{100 * run['lm_head_share']:.0f}%",
        "prefill-rows": "the last position only" if run["prefill_lm_head_rows"] == [1] else
        f"{run['prefill_lm_head_rows']} rows",
        "float32": f"{run['lm_head_alone_float32_ms']:.0f} ms",
        "bfloat16": f"{run['lm_head_alone_bfloat16_ms']:.0f} ms",
    }


FACTS = {"decode-profile": decode_profile_facts}
