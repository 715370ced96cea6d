"""``snapkv bench speed``: prefill time, decode rate, KV bytes and peak memory per prompt length and method.

Everything runs in one process, one configuration after another, so ratios are fair on a noisy machine. Baselines:
the weights-only decode rate (an empty context, the floor no cache can beat) and plain transformers with its
``DynamicCache`` (no hooks, no compression).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..engine import CompressionSettings, SnapKVCache
from ..engine.hooks import attached
from ..generation import GenerationOptions, generate_answer
from ..models.loader import LoadedModel
from .haystack import haystack
from .memory import PeakRSS

DEFAULT_SPEED_LENGTHS = (1024, 2048, 4096, 8192)
DEFAULT_SPEED_BUDGETS = (256, 1024, 2048)


@dataclass
class SpeedPlan:
    lengths: tuple[int, ...] = DEFAULT_SPEED_LENGTHS
    budgets: tuple[int, ...] = DEFAULT_SPEED_BUDGETS
    new_tokens: int = 64
    window_size: int = 32
    kernel_size: int = 15
    pooling: str = "maxpool"
    chunk_size: int | None = None


@dataclass
class SpeedRow:
    length: int
    method: str  # "weights-only", "transformers" (plain DynamicCache), "full" or "snapkv"
    budget: int | None
    prefill_s: float
    selection_s: float  # of the prefill: window queries, scoring, gathering (the SnapKV overhead)
    decode_tokens_per_s: float
    kv_bytes: int  # after the prefill (compressed where compressed)
    peak_rss_bytes: int  # highest RSS during this configuration
    peak_rss_above_start: int


def prose_ids(tokenizer, length: int) -> list[int]:
    """Exactly ``length`` token ids of prose."""
    ids: list[int] = []
    for paragraph in haystack(4000, seed=length):
        ids += tokenizer(paragraph + "\n\n", add_special_tokens=False)["input_ids"]
        if len(ids) >= length:
            return ids[:length]
    raise ValueError(f"not enough prose for {length} tokens")


def _prompt_kv_bytes(cache, decoded_tokens: int) -> int:
    """Bytes of the prompt's keys and values as stored after the prefill (decoded tokens left out)."""
    if isinstance(cache, SnapKVCache):
        return cache.summary()["bytes_after"]
    total = 0
    for layer in cache.layers:
        tokens = layer.keys.shape[2]
        total += 2 * layer.keys.numel() * layer.keys.element_size() * (tokens - decoded_tokens) // tokens
    return total


def _measure(loaded: LoadedModel, ids: list[int], plan: SpeedPlan, method: str, budget: int | None) -> SpeedRow:
    model, tokenizer = loaded.model, loaded.tokenizer
    settings = CompressionSettings(method="full" if method in ("full", "transformers", "weights-only") else method,
                                   window_size=plan.window_size, max_capacity_prompt=budget or plan.window_size + 1,
                                   kernel_size=plan.kernel_size, pooling=plan.pooling)
    gc.collect()
    with PeakRSS() as peak:
        result = generate_answer(model, tokenizer, ids, settings, GenerationOptions(
            max_new_tokens=plan.new_tokens, stop_at_eos=False, prefill_chunk=plan.chunk_size))
        kv_bytes = _prompt_kv_bytes(result.cache, result.decode_steps) if len(ids) > 1 else 0
    selection_s = getattr(result.cache, "selection_seconds", 0.0)
    row = SpeedRow(len(ids), method, budget, round(result.prefill_s, 4), round(selection_s, 4),
                   round(result.decode_tokens_per_s, 2),
                   kv_bytes, peak.bytes, peak.above_start)
    del result
    return row


def run_speed(loaded: LoadedModel, plan: SpeedPlan, on_row: Callable[[SpeedRow], None] | None = None) -> list[SpeedRow]:
    rows: list[SpeedRow] = []

    def record(row: SpeedRow) -> None:
        rows.append(row)
        if on_row is not None:
            on_row(row)

    with attached(loaded.model):
        bos = loaded.tokenizer.bos_token_id
        record(_measure(loaded, [bos if bos is not None else 0], plan, "weights-only", None))
        for length in plan.lengths:
            ids = prose_ids(loaded.tokenizer, length)
            record(_measure(loaded, ids, plan, "transformers", None))
            record(_measure(loaded, ids, plan, "full", None))
            for budget in plan.budgets:
                if budget < length:
                    record(_measure(loaded, ids, plan, "snapkv", budget))
    return rows


def to_json(plan: SpeedPlan, rows: list[SpeedRow], machine: dict) -> dict:
    return {"schema_version": 1, "kind": "speed", "plan": asdict(plan), "machine": machine,
            "rows": [asdict(row) for row in rows]}
