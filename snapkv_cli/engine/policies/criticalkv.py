"""CriticalKV (arXiv 2502.03805): attention alone picks part of each head's budget, attention x projected value norm
the rest.

A kept entry's effect on the layer's output is its attention weight times its value as the output projection sees
it, ``W_o v``; an entry with high attention but a tiny projected value barely matters, and the reverse. The paper
bounds the output perturbation with both and selects in two stages: first the top ``critical_first_stage`` share of
each head's budget by attention score, then the rest by ``(score + epsilon) * ||W_o^h v||_1``, the L1 norm of the
value projected through its query head's columns of ``o_proj``, averaged over the query heads of the KV group.
"""

from __future__ import annotations

import torch

from .base import LayerContext, Policy
from .snapkv import pooled_window_votes

EPSILON = 1e-4  # per window query: scores summed over a window of w queries get w * EPSILON
NORM_BLOCK = 1024  # positions projected at a time (bounds the (group, positions, hidden) temporary)


def projected_value_norms(values: torch.Tensor, output_projection: torch.Tensor) -> torch.Tensor:
    """(batch, kv_heads, positions) float32: ``||W_o^h v||_1`` averaged over the query heads ``h`` of each KV group.

    values: (batch, kv_heads, positions, head_dim); output_projection: (hidden, query_heads * head_dim).
    """
    batch, kv_heads, positions, head_dim = values.shape
    hidden = output_projection.shape[0]
    group = output_projection.shape[1] // head_dim // kv_heads
    # (hidden, query_heads * head_dim) -> (kv_heads, group, head_dim, hidden): query head q = kv_head * group + g
    per_head = output_projection.float().t().reshape(kv_heads, group, head_dim, hidden)
    norms = []
    for first in range(0, positions, NORM_BLOCK):
        block = values[:, :, first:first + NORM_BLOCK].float().unsqueeze(2)  # (batch, kv_heads, 1, n, head_dim)
        projected = torch.matmul(block, per_head)  # (batch, kv_heads, group, n, hidden)
        norms.append(projected.abs().sum(dim=-1).mean(dim=2))
    return torch.cat(norms, dim=-1)


def critical_ranking(context: LayerContext, scores: torch.Tensor, head_budgets: torch.Tensor,
                     epsilon: float) -> torch.Tensor:
    """(batch, kv_heads, prompt_length) CriticalKV's two-stage order over the positions before the window.

    Stage one: each head's top ``floor(critical_first_stage * budget)`` positions by ``scores`` rank first (+inf).
    Stage two: the others rank by ``(scores + epsilon) * ||W_o v||_1``. Window positions keep their scores (they are
    always kept).
    """
    if context.output_projection is None or context.values is None:
        raise ValueError("CriticalKV needs the layer's values and output projection")
    window = context.settings.window_size
    prefix_length = scores.shape[-1] - window
    prefix_scores = scores[..., :prefix_length].float()
    norms = projected_value_norms(context.values[:, :, :prefix_length], context.output_projection)
    weighted = (prefix_scores + epsilon) * norms.to(prefix_scores.device)
    first_stage = (head_budgets.to(scores.device) * context.settings.critical_first_stage).long()
    most = int(first_stage.max())
    if most > 0:
        top = prefix_scores.topk(most, dim=-1).indices
        taken = torch.arange(most, device=scores.device) < first_stage[..., None]
        in_first_stage = torch.zeros_like(weighted, dtype=torch.bool).scatter_(-1, top, taken)
        weighted = weighted.masked_fill(in_first_stage, float("inf"))
    return torch.cat([weighted, scores[..., prefix_length:].float()], dim=-1)


class CriticalKVPolicy(Policy):
    name = "criticalkv"
    description = "SnapKV scores; half of each head's budget by attention, the rest by attention x ||W_o v|| (CriticalKV)"

    def scores(self, context: LayerContext) -> torch.Tensor:
        return pooled_window_votes(context)

    def ranking(self, context: LayerContext, scores: torch.Tensor, head_budgets: torch.Tensor) -> torch.Tensor:
        return critical_ranking(context, scores, head_budgets, EPSILON * self.settings.window_size)
