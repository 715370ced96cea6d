"""What a layer gathers over the prefill chunks before it is compressed: the last ``window_size`` queries (and,
for H2O, attention summed over every prompt query), recomputed from each chunk's attention inputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attention import attention_probabilities
from .families import attention_scaling, logit_softcap, project_queries
from .prefix_norms import PrefixValueNorms
from .settings import CompressionSettings


@dataclass
class ChunkQueries:
    """One prefill chunk's inputs to a layer's attention, from which any of its queries can be recomputed.

    hidden_states: (batch, tokens, hidden); cos, sin: (batch, tokens, rotary_dim); start: position of token 0.
    """

    module: nn.Module
    hidden_states: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    start: int

    @property
    def length(self) -> int:
        return self.hidden_states.shape[1]

    def queries(self, first: int, last: int) -> torch.Tensor:
        """(batch, query_heads, last - first, head_dim) rotated queries of chunk tokens [first, last)."""
        return project_queries(
            self.module, self.hidden_states[:, first:last], self.cos[:, first:last], self.sin[:, first:last]
        )

    def positions(self, first: int, last: int) -> torch.Tensor:
        return torch.arange(self.start + first, self.start + last, device=self.hidden_states.device)


@dataclass
class PendingLayer:
    """What a layer gathers over the prefill chunks before it is compressed."""

    window_queries: torch.Tensor | None = None  # (batch, query_heads, <= window, head_dim)
    window_positions: torch.Tensor | None = None  # (<= window,)
    accumulated_attention: torch.Tensor | None = None  # (batch, kv_heads, group, keys so far)
    value_norms: PrefixValueNorms | None = None  # a shared prefix's projected value norms, for every fork

    def absorb(self, chunk: ChunkQueries, keys: torch.Tensor, settings: CompressionSettings, accumulate: bool) -> None:
        """Keep the latest ``window_size`` queries; optionally add this chunk's attention column sums.

        keys: (batch, kv_heads, keys so far, head_dim), this chunk's included.
        """
        window = settings.window_size
        first = max(0, chunk.length - window)
        queries, positions = chunk.queries(first, chunk.length), chunk.positions(first, chunk.length)
        if self.window_queries is not None:
            queries = torch.cat([self.window_queries, queries], dim=2)[:, :, -window:]
            positions = torch.cat([self.window_positions, positions])[-window:]
        self.window_queries, self.window_positions = queries, positions
        if accumulate:
            self._accumulate(chunk, keys, settings.query_block_size)

    def _accumulate(self, chunk: ChunkQueries, keys: torch.Tensor, block_size: int) -> None:
        scaling, softcap = attention_scaling(chunk.module), logit_softcap(chunk.module)
        total = None
        for first in range(0, chunk.length, block_size):
            last = min(first + block_size, chunk.length)
            probabilities = attention_probabilities(
                chunk.queries(first, last), keys, chunk.positions(first, last), scaling, softcap
            )
            block_sum = probabilities.sum(dim=3)
            total = block_sum if total is None else total + block_sum
        if self.accumulated_attention is not None:
            grown = keys.shape[2] - self.accumulated_attention.shape[-1]
            total = total + torch.nn.functional.pad(self.accumulated_attention, (0, grown))
        self.accumulated_attention = total
