"""How a budget is shared out: over layers (uniform or PyramidKV's pyramid) and over a layer's KV heads (uniform,
AdaKV's adaptive split, or shared: the same positions for every head). Any scoring policy can use any of them; the
policies only pick their defaults.
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
    if how in ("uniform", "shared") or kv_heads == 1:
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


def shared_ranking(ranking: torch.Tensor, window_size: int) -> torch.Tensor:
    """One order of the positions before the window for every KV head of a layer, fused from the heads' own orders.

    ranking: (batch, kv_heads, prompt_length), higher kept first. Returns (batch, kv_heads, prompt_length) int64,
    the same row for every head. Before the window a position ranks by the best place any head gives it, so every
    head's favourites come first (a code that one head singles out is kept by all heads of its layer); ties go to the
    smaller sum of places (positions several heads want). The window's entries are 0: it is always kept anyway.
    """
    batch, kv_heads, prompt_length = ranking.shape
    prefix_length = prompt_length - window_size
    order = ranking[..., :prefix_length].argsort(dim=-1, descending=True, stable=True)
    places = torch.empty_like(order)
    places.scatter_(-1, order, torch.arange(prefix_length, device=ranking.device).expand_as(order))
    best, total = places.amin(dim=1, keepdim=True), places.sum(dim=1, keepdim=True)
    fused = -(best * (kv_heads * prefix_length) + total)  # total < kv_heads * prefix_length: best place decides first
    window = torch.zeros(batch, 1, window_size, dtype=torch.long, device=ranking.device)
    return torch.cat([fused, window], dim=-1).expand(-1, kv_heads, -1)
