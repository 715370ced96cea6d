"""How a budget is shared out: over layers (uniform or PyramidKV's pyramid) and over a layer's KV heads (uniform or
AdaKV's adaptive split). Any scoring policy can use either; the policies only pick their defaults.
"""

from __future__ import annotations

import torch

from .settings import CompressionSettings


def layer_capacity(settings: CompressionSettings, how: str, layer_idx: int, num_layers: int,
                   prompt_length: int) -> int:
    """Tokens per KV head that layer ``layer_idx`` keeps (window included).

    ``uniform``: the requested budget everywhere. ``pyramid`` (PyramidKV): budgets form a decreasing arithmetic
    sequence whose mean is the requested budget; the shallowest layer keeps about twice the requested tokens beyond
    the window, the deepest ``1 / pyramid_beta`` of them; never more than the prompt.
    """
    capacity = settings.capacity_for(prompt_length)
    if how == "uniform" or num_layers == 1:
        return capacity
    window = settings.window_size
    mean_extra = capacity - window
    smallest = mean_extra // settings.pyramid_beta
    largest = min(2 * mean_extra - smallest, prompt_length - window)
    smallest = 2 * mean_extra - largest
    step = (largest - smallest) / (num_layers - 1)
    return round(largest - layer_idx * step) + window


def head_prefix_budgets(prefix_scores: torch.Tensor, prefix_budget: int, how: str, floor: float) -> torch.Tensor:
    """How many positions before the window each KV head keeps: (batch, kv_heads) int64, each row summing to
    ``kv_heads * prefix_budget``.

    prefix_scores: (batch, kv_heads, prefix_length) scores of the positions before the window, comparable across
    the heads of a layer (attention mass). ``uniform``: ``prefix_budget`` each. ``adaptive`` (AdaKV): every head
    first gets its own top ``floor * prefix_budget`` positions, then one top-k over all heads' remaining positions
    fills the layer's total, so heads whose attention is spread out get more room than heads that look at a few
    tokens. Requires ``prefix_budget <= prefix_length``.
    """
    batch, kv_heads, prefix_length = prefix_scores.shape
    uniform = torch.full((batch, kv_heads), prefix_budget, dtype=torch.long, device=prefix_scores.device)
    if how == "uniform" or kv_heads == 1:
        return uniform
    guaranteed = int(floor * prefix_budget)
    ranked = prefix_scores.float().clone()
    if guaranteed > 0:
        floor_positions = ranked.topk(guaranteed, dim=-1).indices
        ranked.scatter_(-1, floor_positions, float("inf"))
    chosen = ranked.reshape(batch, kv_heads * prefix_length).topk(kv_heads * prefix_budget, dim=-1).indices
    counts = torch.zeros(batch, kv_heads, dtype=torch.long, device=prefix_scores.device)
    counts.scatter_add_(1, chosen // prefix_length, torch.ones_like(chosen))
    return counts
