"""Turn per-position scores into kept positions, and gather those positions from a layer's states."""

from __future__ import annotations

import torch


def select_kept_positions(scores: torch.Tensor, window_size: int, capacity: int) -> torch.Tensor:
    """Top ``capacity - window_size`` positions before the window, plus the whole window, sorted.

    scores: (batch, kv_heads, prompt_length). Returns (batch, kv_heads, capacity) int64, ascending per head.
    Requires window_size < capacity < prompt_length.
    """
    batch, kv_heads, prompt_length = scores.shape
    prefix_length = prompt_length - window_size
    chosen = scores[..., :prefix_length].topk(capacity - window_size, dim=-1).indices.sort(dim=-1).values
    window = torch.arange(prefix_length, prompt_length, device=scores.device).expand(batch, kv_heads, window_size)
    return torch.cat([chosen, window], dim=-1)


def gather_positions(states: torch.Tensor, kept_positions: torch.Tensor) -> torch.Tensor:
    """states: (batch, kv_heads, prompt_length, head_dim); kept_positions: (batch, kv_heads, kept).

    Returns (batch, kv_heads, kept, head_dim), contiguous.
    """
    index = kept_positions.to(states.device).unsqueeze(-1).expand(-1, -1, -1, states.shape[-1])
    return states.gather(2, index)
