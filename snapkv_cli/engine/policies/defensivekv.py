"""DefensiveKV (arXiv 2510.13334): the window's votes aggregated by their worst case, with a prior correction.

Mean (or sum) aggregation trusts that what the window's queries attend to now is what later queries will need; a
position that one query needed badly but the others ignored gets averaged away. Defensive aggregation instead keeps,
per position, the largest attention any window query (of any query head of the KV group) gave it, after pooling each
query's row and rescaling it to that row's mass before the window; then the prior correction lifts every position to
at least the mean of these maxima over the positions (a uniform prior on risk), so that the ranking among the many
positions no query singled out falls to the value norms. As in the paper, this is built on Ada-CriticalKV: the
budget is split over the KV heads adaptively (AdaKV) and selected in CriticalKV's two stages.
"""

from __future__ import annotations

import torch

from ..attention import pool_scores
from .base import LayerContext, Policy
from .criticalkv import EPSILON, critical_ranking


def defensive_scores(context: LayerContext) -> torch.Tensor:
    """(batch, kv_heads, prompt_length) worst-case window votes with the prior correction.

    Before the window: each window query's attention row (per query head) is pooled (``kernel_size``, ``pooling``,
    ``pooling_window``) and rescaled to the row's own mass before the window, the maximum is taken over window
    queries and the query heads of the group, and positions below the mean of those maxima are raised to it. Window
    positions carry their raw maxima (they are always kept).
    """
    settings = context.settings
    attention = context.window_attention  # (batch, kv_heads, group, window, prompt_length)
    window = attention.shape[3]
    rows = attention[..., :-window]
    pooled = pool_scores(rows, settings.kernel_size, settings.pooling, settings.pooling_window)
    mass = rows.sum(dim=-1, keepdim=True)
    pooled = pooled * (mass / pooled.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(pooled.dtype).tiny))
    worst = pooled.amax(dim=(2, 3))  # (batch, kv_heads, prefix_length)
    corrected = torch.maximum(worst, worst.mean(dim=-1, keepdim=True))
    return torch.cat([corrected, attention[..., -window:].amax(dim=(2, 3))], dim=-1)


class DefensiveKVPolicy(Policy, method="defensivekv"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        return defensive_scores(context)

    def ranking(self, context: LayerContext, scores: torch.Tensor, head_budgets: torch.Tensor) -> torch.Tensor:
        return critical_ranking(context, scores, head_budgets, EPSILON)
