"""The report of one question: a plain dict with one stable schema, shared by ``--json`` and the terminal view."""

from __future__ import annotations

import resource
import sys
from collections import Counter

import torch

from .engine import SnapKVCache
from .generation import GenerationResult
from .prompting import Prompt

SCHEMA_VERSION = 1


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def layer_rows(cache: SnapKVCache) -> list[dict]:
    """Per layer: kept tokens across (batch, KV head), the budget, and whether it was compressed."""
    rows = []
    for layer in sorted(cache.records):
        record = cache.records[layer]
        kept = record.kept_per_head()  # real tokens per (batch, KV head); padded heads differ
        rows.append({
            "layer": layer,
            "kept_tokens_min": int(kept.min()),
            "kept_tokens_max": int(kept.max()),
            "kept_tokens_mean": float(kept.float().mean()),
            "capacity": record.capacity,
            "compressed": record.compressed,
            "sliding_window": record.sliding,
        })
    return rows


def page_rows(cache: SnapKVCache, prompt: Prompt) -> list[dict]:
    """Per document page: its tokens and the share of them kept over all (layer, KV head) pairs."""
    page_tokens = Counter(page for page in prompt.token_pages if page is not None)
    if not page_tokens:
        return []
    page_of_position = torch.tensor([page or 0 for page in prompt.token_pages])
    kept_counts: Counter = Counter()
    pairs = 0
    for record in cache.records.values():
        positions = record.kept_positions.reshape(-1, record.kept_positions.shape[-1]).cpu()
        pairs += positions.shape[0]
        pages, counts = page_of_position[positions.reshape(-1)].unique(return_counts=True)
        kept_counts.update({int(page): int(count) for page, count in zip(pages, counts) if page})
    return [
        {"page": page, "document_tokens": tokens, "kept_share": round(kept_counts[page] / (tokens * pairs), 4)}
        for page, tokens in sorted(page_tokens.items())
    ]


def build_report(*, model_name: str, device: str, dtype: str, prompt: Prompt, result: GenerationResult,
                 load_s: float, document: str, question: str) -> dict:
    """The ``--json`` object of ``snapkv ask`` (documented in the README)."""
    settings = result.cache.settings
    summary = result.cache.summary()
    return {
        "schema_version": SCHEMA_VERSION,
        "answer": result.answer,
        "question": question,
        "document": document,
        "model": model_name,
        "device": device,
        "dtype": dtype,
        "method": settings.method,
        "settings": {
            "window_size": settings.window_size,
            "max_capacity_prompt": settings.capacity_for(prompt.length),
            "budget": settings.max_capacity_prompt,
            "kernel_size": settings.kernel_size,
            "pooling": settings.pooling,
            "gqa_aggregation": settings.gqa_aggregation,
        },
        "prompt_tokens": prompt.length,
        "prompt": {**prompt.counts(), **prompt.window_report(settings.window_size),
                   "truncated_document_tokens": prompt.truncated_document_tokens},
        "generated_tokens": len(result.generated_ids),
        "cache": summary,
        "layers": layer_rows(result.cache),
        "pages": page_rows(result.cache, prompt),
        "timings": {
            "load_s": round(load_s, 3),
            "prefill_s": round(result.prefill_s, 3),
            "decode_s": round(result.decode_s, 3),
            "decode_tokens_per_s": round(result.decode_tokens_per_s, 2),
            "selection_s": round(result.cache.selection_seconds, 3),
        },
        "memory": {
            "peak_rss_bytes": peak_rss_bytes(),
            "cuda_peak_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
        },
    }
