"""What happened to each layer's prompt cache (:class:`LayerRecord`), and the cache's size summary over them."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LayerRecord:
    """What happened to one layer's prompt cache.

    kept_positions: (batch, kv_heads, slots) the prompt position in each cache slot: ascending, window last;
    scores: (batch, kv_heads, prompt_length) policy scores, or None when nothing was scored (the prompt fitted, the
    method keeps all, or a sliding layer). kept_counts: (batch, kv_heads) real tokens per head when heads keep
    different numbers (AdaKV); each row's slots after its count are padding (the last prompt position repeated,
    masked out of attention). None when every slot is real.
    """

    layer: int
    prompt_length: int
    capacity: int
    kept_positions: torch.Tensor
    scores: torch.Tensor | None
    bytes_before: int
    bytes_after: int
    sliding: bool = False
    kept_counts: torch.Tensor | None = None

    @property
    def compressed(self) -> bool:
        """Whether the policy evicted anything (a sliding layer's own window does not count)."""
        return not self.sliding and bool((self.kept_per_head() < self.prompt_length).any())

    def kept_per_head(self) -> torch.Tensor:
        """(batch, kv_heads) int64 real tokens each KV head keeps (window included; padding not counted)."""
        if self.kept_counts is not None:
            return self.kept_counts
        return torch.full(self.kept_positions.shape[:2], self.kept_positions.shape[-1], dtype=torch.long)

    def head_positions(self, batch: int, head: int) -> torch.Tensor:
        """(kept,) the ascending prompt positions one KV head keeps, without padding."""
        return self.kept_positions[batch, head, : int(self.kept_per_head()[batch, head])]

    def kept_scores(self) -> torch.Tensor | None:
        """(batch, kv_heads, kept) scores of the kept positions."""
        if self.scores is None:
            return None
        return self.scores.gather(-1, self.kept_positions)


def state_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def uncompressed_record(layer_idx: int, keys: torch.Tensor, stored, prompt_length: int, *,
                        capacity: int | None = None, sliding: bool = False) -> LayerRecord:
    """The record of a layer kept as stored: all of the prompt, or a sliding layer's last tokens.

    Its bytes before and after are both what it stores. A sliding layer never stores more than its window, with
    or without compression, so the report's totals count what a cache really holds.
    keys: (batch, kv_heads, attended, head_dim), what this forward's attention saw; stored: the cache layer.
    """
    batch, kv_heads = keys.shape[:2]
    kept = stored.keys.shape[2]
    stored_bytes = state_bytes(stored.keys, stored.values)
    return LayerRecord(
        layer=layer_idx,
        prompt_length=prompt_length,
        capacity=prompt_length if capacity is None else capacity,
        kept_positions=torch.arange(prompt_length - kept, prompt_length, device=keys.device).expand(
            batch, kv_heads, kept),
        scores=None,
        bytes_before=stored_bytes,
        bytes_after=stored_bytes,
        sliding=sliding,
    )


def longest_prompt(records: dict[int, LayerRecord]) -> int:
    return max((record.prompt_length for record in records.values()), default=0)


def summarize(records: dict[int, LayerRecord]) -> dict:
    """:meth:`SnapKVCache.summary <snapkv_cli.engine.SnapKVCache.summary>` of these records."""
    ordered = [records[i] for i in sorted(records)]
    bytes_before = sum(r.bytes_before for r in ordered)
    bytes_after = sum(r.bytes_after for r in ordered)
    kept = [float(r.kept_per_head().float().mean()) for r in ordered]
    slots = [r.kept_positions.shape[-1] for r in ordered]
    return {
        "tokens_before": longest_prompt(records),
        "tokens_after": round(sum(kept) / len(kept), 2) if kept else 0,
        "tokens_allocated": round(sum(slots) / len(slots), 2) if slots else 0,
        "bytes_before": bytes_before,
        "bytes_after": bytes_after,
        "compression_ratio": round(bytes_before / bytes_after, 4) if bytes_after else 1.0,
    }
