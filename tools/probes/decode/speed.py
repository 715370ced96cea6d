"""``speed``: decode speed from a compressed cache on a CPU: this project's decoding step against the model's
own forward.

For each weight dtype and prompt length, prefills LENGTH tokens of prose once with the command line's default method
and settings (budget ``--budget``), then times greedy decoding steps from that compressed cache, in rounds, at each
thread count. Rows, interleaved within a round (odd rounds in reverse order):

- ``snapkv``: the decoding step as ``generate_answer`` runs it (hooks attached, ``SnapKVCache``);
- ``snapkv-gqa``: the same with transformers' own sdpa dispatch at decode (grouped query heads, no mask): the step
  before the reduced-precision decoding mask (``snapkv_cli.engine.masking.packs_decode_queries``) existed;
- ``model-only``: the model's own forward, hooks detached, on a transformers ``DynamicCache`` holding the same kept
  keys and values: the floor of this model's forward at that cache size.

After each timed run the caches are cropped back to their prefilled length (decoded tokens are views into the
buffers, so nothing is copied), so every run decodes the same tokens from the same cache; the ``snapkv`` and
``snapkv-gqa`` rows' token ids are checked to be identical. Prints one line per row, and the ratio of the ``snapkv``
row to the ``snapkv-gqa`` row paired within each round, and writes JSON with provenance.

Usage::

    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.probes.decode speed --lengths 2048 4096 8192 \
        --threads 1 2 --dtypes float32 bfloat16 --rounds 3 --out docs/results/decode_speed.json
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from tools.docs import prose
from tools.probes.decode import common

ROWS = ("snapkv", "snapkv-gqa", "model-only")


def arguments(parser) -> None:
    parser.add_argument("--model", default=None, help="default: the default model")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="each thread count in turn")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the results with their provenance to this JSON file")


def run(args) -> None:
    from snapkv_cli.bench.provenance import run_start

    started = run_start()  # the thread counts take turns within each round (common.start sets one)
    import torch

    from snapkv_cli.bench.speed import prose_ids
    from snapkv_cli.bench.spread import spread
    from snapkv_cli.defaults import CLI_DEFAULTS, METHOD, METHOD_SETTINGS
    from snapkv_cli.engine import CompressionSettings
    from snapkv_cli.models.catalog import default_prefill_chunk
    from snapkv_cli.models.loader import load_model

    settings = CompressionSettings(method=METHOD, **{**CLI_DEFAULTS, "max_capacity_prompt": args.budget},
                                   **METHOD_SETTINGS)
    results, loaded = [], None
    for dtype in args.dtypes:
        loaded = load_model(args.model, device="cpu", dtype=dtype)
        chunk = default_prefill_chunk(loaded.name, loaded.model.config)
        for length in args.lengths:
            runs = {(row, threads): [] for row in ROWS for threads in args.threads}
            caches = _prefilled(loaded, prose_ids(loaded.tokenizer, length), settings, chunk)
            for round_index in range(args.rounds):
                order = [(row, threads) for threads in args.threads for row in ROWS]
                for row, threads in order if round_index % 2 == 0 else order[::-1]:
                    torch.set_num_threads(threads)
                    runs[row, threads].append(_decode(loaded.model, caches, row, args.new_tokens))
            for threads in args.threads:
                ids = {row: runs[row, threads][0]["ids"] for row in ROWS}
                for row in ROWS:
                    rates = [run["tokens_per_s"] for run in runs[row, threads]]
                    result = {"dtype": dtype, "length": length, "kept": caches["kept"], "threads": threads,
                              "row": row, "decode_tokens_per_s": spread(rates),
                              "rounds": [round(rate, 2) for rate in rates],
                              "same_ids_as_snapkv": ids[row] == ids["snapkv"]}
                    results.append(result)
                    print(json.dumps(result), flush=True)
                ratios = [a["tokens_per_s"] / b["tokens_per_s"]
                          for a, b in zip(runs["snapkv", threads], runs["snapkv-gqa", threads], strict=True)]
                ratio = {"dtype": dtype, "length": length, "threads": threads, "row": "snapkv / snapkv-gqa",
                         "paired_ratio": spread(ratios), "rounds": [round(value, 3) for value in ratios]}
                results.append(ratio)
                print(json.dumps(ratio), flush=True)
        del caches
    torch.set_num_threads(max(args.threads))
    common.write(args, started, "decode_speed", loaded, settings=settings.as_dict(), results=results)


def _prefilled(loaded, ids: list[int], settings, chunk: int | None) -> dict:
    """The compressed cache after a prefill of ``ids``, a ``DynamicCache`` holding copies of its kept keys and
    values (the model-only row's), the first decoded token and the positions decoding starts at."""
    import torch
    from transformers.cache_utils import DynamicCache

    from snapkv_cli.engine import SnapKVCache, prepare
    from snapkv_cli.generation import prefill

    model = prepare(loaded.model)
    cache = SnapKVCache(settings=settings, config=model.config)
    with torch.inference_mode():
        logits = prefill(model, ids, cache, chunk_size=chunk)
        plain = DynamicCache(config=model.config)
        for index, layer in enumerate(cache.layers):
            plain.update(layer.keys.clone(), layer.values.clone(), index)
    kept = cache.get_seq_length(0)
    return {"snapkv": cache, "model-only": plain, "first": logits.argmax(dim=-1, keepdim=True), "kept": kept,
            "prompt_length": len(ids)}


def _decode(model, caches: dict, row: str, steps: int) -> dict:
    """``steps`` greedy decoding steps of ``row`` from the prefilled caches (cropped back afterwards)."""
    import torch

    import snapkv_cli.engine.hooks as hooks
    from snapkv_cli.engine.hooks import detached

    cache = caches["model-only" if row == "model-only" else "snapkv"]
    packs = hooks.packs_decode_queries
    if row == "snapkv-gqa":
        hooks.packs_decode_queries = lambda *args: False
    token, ids = caches["first"], []
    try:
        with torch.inference_mode(), detached(model) if row == "model-only" else contextlib.nullcontext():
            started = time.perf_counter()
            for step in range(steps):
                ids.append(int(token))
                position = torch.tensor([caches["prompt_length"] + step])
                logits = model(token, cache=cache, position_ids=position[None], cache_position=position,
                               use_cache=True).logits[:, -1]
                token = logits.argmax(dim=-1, keepdim=True)
            elapsed = time.perf_counter() - started
    finally:
        hooks.packs_decode_queries = packs
        decoded = cache.get_seq_length(0) - caches["kept"]
        if decoded:
            cache.crop(-decoded)  # transformers' crop takes the number of tokens to remove
    return {"tokens_per_s": steps / elapsed, "ids": ids}


# -- the docs' tables and facts from its JSON (tools.docs.tables) ---------------------------------------------------

def decode_speed(path: str) -> str:
    """Decode tok/s from a compressed cache: this project's step, the grouped-query dispatch it replaced in reduced
    precision, and the model's bare forward on a plain cache (median and interquartile range over the rounds)."""
    report = prose.load(path)
    cells: dict = {}
    for result in report["results"]:
        if "decode_tokens_per_s" not in result:  # a paired ratio's row
            continue
        stats = result["decode_tokens_per_s"]
        cells.setdefault((result["dtype"], result["threads"], result["length"]), {})[result["row"]] = (
            f"{stats['median']:.1f} ({stats['q1']:.1f}-{stats['q3']:.1f})")
    rows = [[dtype, str(threads), f"{length:,}", row.get("snapkv", "-"), row.get("snapkv-gqa", "-"),
             row.get("model-only", "-")] for (dtype, threads, length), row in sorted(cells.items())]
    return prose.table((["weights", "threads", "prompt tokens", "snapkv-cli", "grouped dispatch (before)",
                         "model's own forward, plain cache"], rows))


TABLES = {"decode-speed": decode_speed}
