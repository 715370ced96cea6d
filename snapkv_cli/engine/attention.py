"""Attention probabilities recomputed for a few queries against all keys (never prompt x prompt)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attention_probabilities(
    queries: torch.Tensor,
    keys: torch.Tensor,
    query_positions: torch.Tensor,
    scaling: float,
    softcap: float | None = None,
) -> torch.Tensor:
    """Causal softmax attention of ``queries`` over ``keys``, in float32.

    queries: (batch, num_query_heads, q, head_dim), already rotated.
    keys: (batch, num_kv_heads, k, head_dim); key j sits at position j.
    query_positions: (q,) absolute positions of the queries; a query sees keys at positions <= its own.
    Returns (batch, num_kv_heads, group, q, k) with group = num_query_heads // num_kv_heads.
    """
    batch, num_query_heads, num_queries, head_dim = queries.shape
    num_kv_heads, num_keys = keys.shape[1], keys.shape[2]
    group = num_query_heads // num_kv_heads
    # one plain batched product per KV head (group x queries rows), not a broadcast over the group
    grouped = queries.float().reshape(batch, num_kv_heads, group * num_queries, head_dim)
    logits = torch.matmul(grouped, keys.float().transpose(-1, -2)).mul_(scaling)
    logits = logits.view(batch, num_kv_heads, group, num_queries, num_keys)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    first_future = int(query_positions.min()) + 1  # keys before it are visible to every query: mask only the rest
    if first_future < num_keys:
        key_positions = torch.arange(first_future, num_keys, device=keys.device)
        future = key_positions[None, :] > query_positions.to(keys.device)[:, None]
        logits[..., first_future:].masked_fill_(future, float("-inf"))
    return torch.softmax(logits, dim=-1)


def pool_scores(scores: torch.Tensor, kernel_size: int, pooling: str, window: str = "centered") -> torch.Tensor:
    """1-D pooling over positions, stride 1, same length out; zero padding, counted in averages (PyTorch's default).

    ``window`` ``centered`` pools ``kernel_size // 2`` positions either side of each position (SnapKV); ``causal``
    pools the position and the ``kernel_size - 1`` positions before it (padding on the left only).
    scores: (..., positions) -> same shape.
    """
    if kernel_size == 1 or scores.shape[-1] == 0:
        return scores
    leading = scores.shape[:-1]
    flat = scores.reshape(-1, 1, scores.shape[-1])
    # max pooling pads with -inf in PyTorch; scores are non-negative, so zero padding is equivalent there, and it
    # is what avg pooling counts: one explicit pad serves both, and lets the causal window pad one side only
    padding = (kernel_size - 1, 0) if window == "causal" else (kernel_size // 2, kernel_size // 2)
    pool = F.avg_pool1d if pooling == "avgpool" else F.max_pool1d
    pooled = pool(F.pad(flat, padding), kernel_size, stride=1)
    return pooled.reshape(*leading, -1)


def aggregate_group(scores: torch.Tensor, how: str) -> torch.Tensor:
    """Reduce per-query-head scores (batch, kv_heads, group, positions) to (batch, kv_heads, positions)."""
    return scores.mean(dim=2) if how == "mean" else scores.amax(dim=2)
