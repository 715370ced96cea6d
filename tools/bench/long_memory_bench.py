"""Where the prefill's peak memory comes from on a long prompt, and what ``--prefill-chunk`` does to it and to time.

Each configuration runs in a fresh process (the peak RSS of a process only grows), on prose from the benchmark
haystack, with SnapKV at budget 1024 (window 32, maxpool 15). Per run it records:

- ``rss_base``: the process after importing torch and transformers, before the model;
- ``weights``: the bytes of the model's parameters (float32), all resident after one forward (the tied 262k-token
  embedding / output projection alone is 671 MB for Gemma 3 270M);
- ``peak``: the highest RSS during the prefill (sampled every 2 ms) and the process's ``ru_maxrss``;
- ``largest_mask``: the largest attention mask handed to SDPA (``q x kv`` booleans; PyTorch turns a boolean mask
  into a float one of the same shape inside SDPA, so 5 bytes per entry are alive at once);
- ``kv_stored``: the KV bytes the cache holds after the prefill (compressed global layers, sliding windows);
- ``kv_deferred``: the uncompressed KV of the global layers that chunked prefill keeps until the last chunk.

Usage (heavy: run under the shared lock)::

    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.bench.long_memory_bench \
        --runs 8192:0,8192:512,8192:1024,8192:2048,8192:4096,32768:1024,32768:2048 --out docs/results/long_memory.json

``LENGTH:CHUNK`` with chunk 0 for one pass. Prints one JSON line per run; ``--out`` writes them all.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from tools.docs import prose


def measure(length: int, chunk: int | None, model: str) -> dict:
    from snapkv_cli.generation.allocator import return_freed_memory_to_os

    return_freed_memory_to_os()
    import torch

    from snapkv_cli.bench.memory import PeakRSS, current_rss_bytes
    from snapkv_cli.bench.speed import prose_ids
    from snapkv_cli.engine import CompressionSettings, SnapKVCache, prepare
    from snapkv_cli.generation import prefill
    from snapkv_cli.models.loader import load_model

    rss_base = current_rss_bytes()
    loaded = load_model(model, device="cpu")
    weights = sum(p.numel() * p.element_size() for p in {p.data_ptr(): p for p in loaded.model.parameters()}.values())
    ids = prose_ids(loaded.tokenizer, length)
    prepare(loaded.model)
    with torch.inference_mode():  # one short forward: every weight page is touched (resident) before measuring
        prefill(loaded.model, ids[:16], SnapKVCache(method="full", config=loaded.model.config))
    rss_loaded = current_rss_bytes()

    masks: list[int] = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, **kwargs):
        if attn_mask is not None:
            masks.append(attn_mask.numel())
        return original(query, key, value, attn_mask=attn_mask, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = spy
    settings = CompressionSettings(method="snapkv", window_size=32, max_capacity_prompt=1024, kernel_size=15,
                                   pooling="maxpool")
    cache = SnapKVCache(settings=settings, config=loaded.model.config)
    with PeakRSS() as peak, torch.inference_mode():
        started = time.perf_counter()
        prefill(loaded.model, ids, cache, chunk_size=chunk)
        seconds = time.perf_counter() - started
    torch.nn.functional.scaled_dot_product_attention = original
    config = loaded.model.config.get_text_config()
    global_layers = sum(1 for kind in getattr(config, "layer_types", []) if kind == "full_attention") \
        or config.num_hidden_layers
    kv_per_token_layer = 2 * config.num_key_value_heads * config.head_dim * 4
    return {
        "length": length,
        "chunk": chunk,
        "model": loaded.name,
        "prefill_s": round(seconds, 2),
        "rss_base": rss_base,
        "weights": weights,
        "rss_loaded": rss_loaded,
        "peak": peak.bytes,
        "peak_above_loaded": peak.bytes - rss_loaded,
        "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "largest_mask_entries": max(masks, default=0),
        "largest_mask_bytes_with_float_copy": 5 * max(masks, default=0),
        "kv_stored": cache.summary()["bytes_after"],
        "kv_deferred": global_layers * length * kv_per_token_layer if chunk and chunk < length else 0,
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default="8192:0,8192:2048", help="LENGTH:CHUNK,... (chunk 0 = one pass)")
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one LENGTH:CHUNK in this process
    args = parser.parse_args()
    if args.one:
        length, chunk = (int(part) for part in args.one.split(":"))
        print(json.dumps(measure(length, chunk or None, args.model)), flush=True)
        return
    from snapkv_cli.bench.provenance import provenance, run_start, write_result

    start = run_start()
    rows = []
    for run in args.runs.split(","):
        proc = subprocess.run([sys.executable, __file__, "--one", run, "--model", args.model],
                              capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if proc.returncode != 0:
            print(f"{run}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        write_result(args.out, "long_memory", args, provenance(None, start), runs=rows)


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def long_memory_table(path: str) -> str:
    """Where a long prefill's peak RSS comes from, per length and prefill chunk."""
    mib = 2**20
    rows = []
    for run in prose.load(path)["runs"]:
        others = run["peak_above_loaded"] - run["largest_mask_bytes_with_float_copy"] - run["kv_deferred"]
        rows.append([f"{run['length']:,}", f"{run['chunk']:,}" if run["chunk"] else "one pass",
                     f"{run['prefill_s']:.0f}", f"{run['peak'] / mib:,.0f}", f"{run['rss_loaded'] / mib:,.0f}",
                     f"{run['weights'] / mib:,.0f}", f"{run['peak_above_loaded'] / mib:,.0f}",
                     f"{run['largest_mask_bytes_with_float_copy'] / mib:,.0f}", f"{run['kv_deferred'] / mib:,.0f}",
                     f"{others / mib:,.0f}", f"{run['kv_stored'] / mib:,.1f}"])
    return prose.table((["tokens", "prefill chunk", "prefill s", "peak RSS MiB", "loaded MiB", "of which weights",
                         "peak above loaded", "largest mask (bool + float copy)", "global KV held until the last chunk",
                         "rest (activations, allocator)", "KV kept MiB"], rows))


def long_memory_facts(path: str) -> dict[str, str]:
    """The longest prefill's lowest peak RSS and the chunks it ran in."""
    report = prose.load(path)
    longest = max(run["length"] for run in report["runs"])
    run = min((run for run in report["runs"] if run["length"] == longest), key=lambda run: run["peak"])
    return {"longest": f"{longest:,}", "model": report["args"]["model"], "chunk": f"{run['chunk']:,}",
            "peak": f"{run['peak'] / 2**20:,.0f} MiB", "commit": prose.commits((path,))}


TABLES = {"long-memory-table": long_memory_table}
FACTS = {"long-memory": long_memory_facts}


if __name__ == "__main__":
    main()
