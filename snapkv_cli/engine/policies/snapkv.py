"""SnapKV: the observation window votes with its attention, votes are pooled, the top positions stay."""

from __future__ import annotations

import torch

from ..attention import aggregate_group, pool_scores
from .base import LayerContext, Policy


def pooled_window_votes(context: LayerContext) -> torch.Tensor:
    """(batch, kv_heads, prompt_length) SnapKV scores.

    Before the window: window-query attention summed over the window, pooled (``kernel_size``, ``pooling``,
    ``pooling_window``), then reduced over the query heads of each KV group. Window positions carry their raw
    (unpooled) votes; they are always kept.
    """
    settings = context.settings
    window = context.window_queries.shape[2]
    votes = context.window_attention.sum(dim=3)  # (batch, kv_heads, group, prompt_length)
    prefix = pool_scores(votes[..., :-window], settings.kernel_size, settings.pooling, settings.pooling_window)
    scores = torch.cat([prefix, votes[..., -window:]], dim=-1)
    return aggregate_group(scores, settings.gqa_aggregation)


class SnapKVPolicy(Policy, method="snapkv"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        return pooled_window_votes(context)
