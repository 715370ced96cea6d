"""CriticalKV (arXiv 2502.03805): attention alone picks part of each head's budget, attention x projected value norm
the rest.

A kept entry's effect on the layer's output is its attention weight times its value as the output projection sees
it, ``W_o v``; an entry with high attention but a tiny projected value barely matters, and the reverse. The paper
bounds the output perturbation with both and selects in two stages: first the top ``critical_first_stage`` share of
each head's budget by attention score, then the rest by ``(score + epsilon) * ||W_o^h v||_1``, the L1 norm of the
value projected through its query head's columns of ``o_proj``, averaged over the query heads of the KV group.

Projecting every value through ``o_proj`` would cost a fifth of the prefill on the default model (a (positions,
head_dim) x (head_dim, hidden) product per query head, whose large output is only summed); the second stage therefore
computes the norms only where they can matter, in the order of a cheap upper bound, and stops when no remaining
position can enter the top: the same selection, exactly, for a small share of the work.
"""

from __future__ import annotations

import torch

from .base import LayerContext, Policy
from .snapkv import pooled_window_votes

EPSILON = 1e-4  # per window query: scores summed over a window of w queries get w * EPSILON


def per_query_head_weights(output_projection: torch.Tensor, kv_heads: int, head_dim: int) -> torch.Tensor:
    """(kv_heads, group, head_dim, hidden) float32: query head ``kv_head * group + g``'s columns of ``o_proj``'s
    weight (hidden, query_heads * head_dim), transposed, so that ``value @ weights[h, g]`` is that head's ``W_o v``."""
    hidden = output_projection.shape[0]
    group = output_projection.shape[1] // head_dim // kv_heads
    return output_projection.float().t().reshape(kv_heads, group, head_dim, hidden)


def projected_value_norms(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(positions,) ``||W_o^h v||_1`` averaged over the query heads ``h`` of one KV group.

    values: (positions, head_dim) of one KV head; weights: (group, head_dim, hidden) from
    :func:`per_query_head_weights`.
    """
    group, head_dim, hidden = weights.shape
    return _group_norms(values, weights.transpose(0, 1).reshape(head_dim, group * hidden), group)


NORM_BLOCK = 256  # positions projected at a time: the (block, group * hidden) product stays in the CPU's cache


def _group_norms(values: torch.Tensor, flat_weights: torch.Tensor, group: int) -> torch.Tensor:
    """:func:`projected_value_norms` with the group's weights side by side, (head_dim, group * hidden): one product
    for the whole group, a block of positions at a time, absolute values taken in place. The same floats as one
    batched product per query head (each row's product and sums are computed alike)."""
    values = values.float()
    norms = values.new_empty(values.shape[0])
    for first in range(0, values.shape[0], NORM_BLOCK):
        projected = torch.matmul(values[first:first + NORM_BLOCK], flat_weights).abs_()
        norms[first:first + NORM_BLOCK] = projected.view(projected.shape[0], group, -1).sum(dim=-1).mean(dim=-1)
    return norms


def projected_value_norm_bounds(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(batch, kv_heads, positions) upper bounds on :func:`projected_value_norms`, far cheaper to compute.

    For each query head ``q`` of the group, ``||W_q v||_1 <= sqrt(hidden) ||W_q v||_2 = sqrt(hidden) sqrt(v^T G_q v)``
    with the (head_dim, head_dim) Gram matrix ``G_q = W_q^T W_q``, and the mean over the group of those square roots is
    at most ``sqrt(v^T G v)`` for the group's mean Gram matrix ``G`` (the square root is concave): one small product
    and a scalar per position instead of hidden-sized projections. The L1 norm of a projected value is typically about
    0.8 of this bound (a hidden-sized vector with no dominant entry), tight enough to skip most positions.
    values: (batch, kv_heads, positions, head_dim); weights: (kv_heads, group, head_dim, hidden).
    """
    hidden = weights.shape[-1]
    gram = torch.matmul(weights, weights.transpose(-1, -2)).mean(dim=1)  # (kv_heads, head_dim, head_dim)
    flat = values.float()
    squared = (torch.matmul(flat, gram) * flat).sum(dim=-1)  # (batch, kv_heads, positions)
    slack = 1 + 1e-4  # float rounding must not make the bound fall below the exact norm
    return squared.clamp_min(0).sqrt() * (hidden ** 0.5 * slack)


def second_stage(prefix_scores: torch.Tensor, values: torch.Tensor, weights: torch.Tensor, eligible: torch.Tensor,
                 counts: torch.Tensor, epsilon: float, known_norms: torch.Tensor | None = None) -> torch.Tensor:
    """(batch, kv_heads, positions) float32: ``(score + epsilon) * ||W_o v||_1`` where it was computed, -inf elsewhere.

    Only what decides the top ``counts[b, h]`` eligible positions of each head is computed: positions are visited in
    decreasing order of a cheap upper bound (the score times :func:`projected_value_norm_bounds`), each round up to
    the last one whose bound beats the ``counts``-th best exact value found so far, and visiting stops once the next
    bound cannot, so the top ``counts`` by exact value are the same as if every position had been computed.
    prefix_scores, eligible: (batch, kv_heads, positions); values: (batch, kv_heads, positions, head_dim); counts:
    (batch, kv_heads).

    known_norms: (batch, kv_heads, <= positions) the norms of a shared prefix's first positions that earlier questions
    on it computed (:class:`~snapkv_cli.engine.prefix_norms.PrefixValueNorms`; NaN where none did): a visited position
    whose norm is known costs nothing, and the norms computed here are written into it. The visiting order and where
    it stops do not depend on it, so neither do the positions computed (nor, among equal values, the ones kept).
    """
    weighted_scores = prefix_scores.float() + epsilon
    upper = (weighted_scores * projected_value_norm_bounds(values, weights)).masked_fill(~eligible, float("-inf"))
    exact = torch.full_like(upper, float("-inf"))
    kv_heads, group, head_dim, hidden = weights.shape
    flat_weights = weights.transpose(1, 2).reshape(kv_heads, head_dim, group * hidden)
    shared = 0 if known_norms is None else known_norms.shape[-1]
    batch = upper.shape[0]
    for b in range(batch):
        for h in range(kv_heads):
            need, available = int(counts[b, h]), int(eligible[b, h].sum())
            if need <= 0:
                continue
            order = upper[b, h].argsort(descending=True)
            done, size = 0, min(available, 2 * need + 64)
            while True:
                visit = order[done:size]
                norms = _known_or_computed(values[b, h], flat_weights[h], group, visit,
                                           None if known_norms is None else known_norms[b, h], shared)
                exact[b, h, visit] = weighted_scores[b, h, visit] * norms
                done = size
                kth = exact[b, h].topk(need).values[-1]
                # only a position whose bound beats the kth best exact value so far can still enter the top: those
                # lead the order (``kth`` only rises, so the next round may find fewer still needed)
                size = int((upper[b, h] > kth).sum())
                if size <= done:
                    break
    return exact


def _known_or_computed(values: torch.Tensor, flat_weights: torch.Tensor, group: int, visit: torch.Tensor,
                       known: torch.Tensor | None, shared: int) -> torch.Tensor:
    """(len(visit),) the norms of one head's positions ``visit``: read from ``known`` (its first ``shared``
    positions, NaN where not computed yet) where there, computed (and written into ``known``) elsewhere."""
    if known is None:
        return _group_norms(values[visit], flat_weights, group)
    norms = torch.full(visit.shape, float("nan"), dtype=torch.float32, device=values.device)
    in_prefix = visit < shared
    norms[in_prefix] = known[visit[in_prefix]]
    missing = norms.isnan()
    computed = _group_norms(values[visit[missing]], flat_weights, group)
    norms[missing] = computed
    to_keep = in_prefix[missing]
    known[visit[missing][to_keep]] = computed[to_keep]
    return norms


def critical_ranking(context: LayerContext, scores: torch.Tensor, head_budgets: torch.Tensor,
                     epsilon: float) -> torch.Tensor:
    """(batch, kv_heads, prompt_length) CriticalKV's two-stage order over the positions before the window.

    Stage one: each head's top ``floor(critical_first_stage * budget)`` positions by ``scores`` rank first (+inf).
    Stage two: of the others, the rest of the budget by ``(scores + epsilon) * ||W_o v||_1`` (:func:`second_stage`;
    positions it did not need to compute rank -inf). Window positions keep their scores (they are always kept).
    """
    if context.output_projection is None or context.values is None:
        raise ValueError("CriticalKV needs the layer's values and output projection")
    window = context.settings.window_size
    prefix_length = scores.shape[-1] - window
    prefix_scores = scores[..., :prefix_length].float()
    values = context.values[:, :, :prefix_length]
    weights = per_query_head_weights(context.output_projection, values.shape[1], values.shape[-1])
    first_stage = (head_budgets * context.settings.critical_first_stage).long()
    in_first_stage = torch.zeros_like(prefix_scores, dtype=torch.bool)
    most = int(first_stage.max())
    if most > 0:
        top = prefix_scores.topk(most, dim=-1).indices
        in_first_stage.scatter_(-1, top, torch.arange(most, device=scores.device) < first_stage[..., None])
    memo = getattr(context, "value_norms", None)  # (a context of the tests may be a plain namespace without it)
    known = None if memo is None else memo.norms(values)
    weighted = second_stage(prefix_scores, values, weights, ~in_first_stage, head_budgets - first_stage, epsilon,
                            known)
    weighted = weighted.masked_fill(in_first_stage, float("inf"))
    return torch.cat([weighted, scores[..., prefix_length:].float()], dim=-1)


class CriticalKVPolicy(Policy, method="criticalkv"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        return pooled_window_votes(context)

    def ranking(self, context: LayerContext, scores: torch.Tensor, head_budgets: torch.Tensor) -> torch.Tensor:
        return critical_ranking(context, scores, head_budgets, EPSILON * self.settings.window_size)
