"""The one thing a compression policy does: score prompt positions (or allot a layer its budget).

Selection, gathering and bookkeeping live once, in :mod:`snapkv_cli.engine.selection` and the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import torch

from ..attention import attention_probabilities
from ..settings import CompressionSettings


@dataclass
class LayerContext:
    """What a policy may look at when it scores one layer at the end of the prefill.

    keys: (batch, kv_heads, prompt_length, head_dim), rotated, as the attention saw them.
    window_queries: (batch, query_heads, window, head_dim), the rotated queries of the last prompt tokens.
    window_positions: (window,) their absolute positions.
    accumulated_attention: (batch, kv_heads, group, prompt_length) attention summed over every prompt query,
        present only for policies that set ``accumulates_attention``.
    """

    layer_idx: int
    num_layers: int
    keys: torch.Tensor
    window_queries: torch.Tensor
    window_positions: torch.Tensor
    scaling: float
    softcap: float | None
    settings: CompressionSettings
    accumulated_attention: torch.Tensor | None = field(default=None)

    @property
    def prompt_length(self) -> int:
        return self.keys.shape[2]

    @cached_property
    def window_attention(self) -> torch.Tensor:
        """(batch, kv_heads, group, window, prompt_length) float32 attention of the window queries."""
        return attention_probabilities(
            self.window_queries, self.keys, self.window_positions, self.scaling, self.softcap
        )


class Policy:
    """Base of every compression policy. Subclasses set ``name`` and override :meth:`scores`."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    accumulates_attention: ClassVar[bool] = False
    compresses: ClassVar[bool] = True

    def __init__(self, settings: CompressionSettings):
        self.settings = settings

    def capacity(self, layer_idx: int, num_layers: int, prompt_length: int) -> int:
        """Tokens this layer keeps per KV head, window included."""
        return self.settings.capacity_for(prompt_length)

    def scores(self, context: LayerContext) -> torch.Tensor:
        """(batch, kv_heads, prompt_length) float scores; the highest-scoring positions before the window are kept."""
        raise NotImplementedError
