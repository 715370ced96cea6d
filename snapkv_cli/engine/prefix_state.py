"""An uncompressed prefix as plain tensors, keyed by name (the document cache stores this), and back.

Per layer ``i``: ``layers.i.keys`` and ``layers.i.values`` (batch, kv_heads, prefix_length, head_dim),
``layers.i.window_queries`` (batch, query_heads, <= window_size, head_dim) and ``layers.i.window_positions``
(<= window_size,), the last prefix tokens' rotated queries and their positions (a later question's window can reach
back into them); with attention sums also ``layers.i.accumulated_attention`` (batch, kv_heads, group,
prefix_length).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .pending import PendingLayer

if TYPE_CHECKING:
    from .cache import SnapKVCache

PARTS = ("keys", "values", "window_queries", "window_positions")
SUMS = "accumulated_attention"


def export_prefix(cache: SnapKVCache) -> dict[str, torch.Tensor]:
    """The tensors that rebuild ``cache``'s uncompressed prefix (the cache's own, not copies).

    Raises ``ValueError`` for a compressed cache or sliding-window layers (their states are not the prompt).
    """
    if cache.records:
        raise ValueError("only an uncompressed prefix (filled inside deferred()) has a prefix state")
    if any(cache.is_sliding):
        raise ValueError("the model has sliding-window layers, whose prefix cannot be exported")
    state = {}
    for index, layer in enumerate(cache.layers):
        pending = cache.pending.get(index)
        if pending is None or pending.window_queries is None:
            raise ValueError(f"layer {index} has no window queries: prefill the prefix first")
        parts = {"keys": layer.keys, "values": layer.values, "window_queries": pending.window_queries,
                 "window_positions": pending.window_positions}
        if cache.accumulate_attention:
            parts[SUMS] = pending.accumulated_attention
        state.update({f"layers.{index}.{name}": tensor for name, tensor in parts.items()})
    return state


def import_prefix(cache: SnapKVCache, state: dict[str, torch.Tensor], device: torch.device | str | None) -> None:
    """Fill the empty ``cache`` (laid out for the prefix's model) with the prefix ``state`` describes.

    Each layer's tensors are popped from ``state`` as they are moved to ``device``, so at most one extra layer is
    alive at a time. ``state`` must hold every part of every layer.
    """
    names = PARTS + ((SUMS,) if cache.accumulate_attention else ())
    for index, layer in enumerate(cache.layers):
        parts = {name: state.pop(f"layers.{index}.{name}").to(device) for name in names}
        layer.update(parts.pop("keys"), parts.pop("values"))
        cache.pending[index] = PendingLayer(**parts)
