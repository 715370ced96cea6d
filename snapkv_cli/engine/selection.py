"""Turn per-position rankings into kept positions, and gather those positions from a layer's states."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KeptPositions:
    """What each KV head of a layer keeps, laid out as its cache slots.

    positions: (batch, kv_heads, slots) int64 prompt positions. Each row holds the head's kept positions before the
    window (ascending), then the window, then padding up to ``slots`` (the last prompt position repeated; those
    slots are masked out of attention). counts: (batch, kv_heads) int64 real kept tokens per head (window
    included), or None when every head keeps all ``slots`` (no padding).
    """

    positions: torch.Tensor
    counts: torch.Tensor | None

    @property
    def padded(self) -> bool:
        return self.counts is not None


def select_kept_positions(ranking: torch.Tensor, window_size: int, prefix_budgets: torch.Tensor) -> KeptPositions:
    """Each head's top ``prefix_budgets[b, h]`` positions before the window by ``ranking``, plus the whole window.

    ranking: (batch, kv_heads, prompt_length), higher is kept first (float or integer). prefix_budgets: (batch,
    kv_heads) int64 on ranking's device, each in [0, prompt_length - window_size]. Rows of unequal length are padded
    to the longest (see :class:`KeptPositions`).
    """
    batch, kv_heads, prompt_length = ranking.shape
    prefix_length = prompt_length - window_size
    most = int(prefix_budgets.max())
    top = ranking[..., :prefix_length].topk(most, dim=-1).indices  # best first
    real = torch.arange(most, device=ranking.device) < prefix_budgets[..., None]
    chosen = torch.where(real, top, prefix_length).sort(dim=-1).values  # real positions ascending, then fillers
    uniform = bool((prefix_budgets == most).all())
    slot = torch.arange(most + window_size, device=ranking.device).expand(batch, kv_heads, -1)
    count = prefix_budgets[..., None]
    from_chosen = chosen.gather(-1, slot.clamp(max=most - 1)) if most else slot  # (unused when nothing is chosen)
    positions = torch.where(slot < count, from_chosen,
                            torch.where(slot < count + window_size, prefix_length + slot - count, prompt_length - 1))
    return KeptPositions(positions, None if uniform else prefix_budgets + window_size)


def gather_positions(states: torch.Tensor, kept_positions: torch.Tensor) -> torch.Tensor:
    """states: (batch, kv_heads, prompt_length, head_dim); kept_positions: (batch, kv_heads, kept), on states' device.

    Returns (batch, kv_heads, kept, head_dim), contiguous.
    """
    index = kept_positions.unsqueeze(-1).expand(-1, -1, -1, states.shape[-1])
    return states.gather(2, index)
