"""The one thing a compression policy does: score prompt positions (or allot a layer or its heads their budgets).

Selection, gathering and bookkeeping live once, in :mod:`snapkv_cli.engine.selection` and the cache; how budgets
are shared out over layers and heads lives once, in :mod:`snapkv_cli.engine.allotment`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import ClassVar

import torch

from ..allotment import head_prefix_budgets, layer_capacity
from ..attention import attention_probabilities
from ..methods import METHODS, Method
from ..settings import CompressionSettings


@dataclass
class LayerContext:
    """What a policy may look at when it scores one layer at the end of the prefill.

    keys: (batch, kv_heads, prompt_length, head_dim), rotated, as the attention saw them.
    values: (batch, kv_heads, prompt_length, head_dim).
    window_queries: (batch, query_heads, window, head_dim), the rotated queries of the last prompt tokens.
    window_positions: (window,) their absolute positions.
    accumulated_attention: (batch, kv_heads, group, prompt_length) attention summed over every prompt query,
        present only for policies that set ``accumulates_attention``.
    output_projection: (hidden, query_heads * head_dim), the weight of the attention's output projection (``o_proj``):
        head ``q``'s output reaches the residual stream through columns ``q * head_dim ... (q + 1) * head_dim``.
    """

    layer_idx: int
    keys: torch.Tensor
    window_queries: torch.Tensor
    window_positions: torch.Tensor
    scaling: float
    softcap: float | None
    settings: CompressionSettings
    values: torch.Tensor | None = field(default=None)
    accumulated_attention: torch.Tensor | None = field(default=None)
    output_projection: torch.Tensor | None = field(default=None)

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
    """Base of every compression policy. A subclass names its method (``class SnapKVPolicy(Policy,
    method="snapkv")``), whose facts in :data:`~snapkv_cli.engine.methods.METHODS` become its class attributes, and
    overrides :meth:`scores`.

    A layer is compressed in four steps, each one overridable: :meth:`capacity` (its tokens per KV head),
    :meth:`scores` (what each position is worth), :meth:`head_budgets` (how the layer's budget is split over its KV
    heads) and :meth:`ranking` (the order in which positions are kept; the scores unless the method ranks otherwise).
    ``default_layer_budgets`` and ``default_head_budgets`` apply unless the settings choose otherwise;
    ``pools_votes`` says whether the scores are pooled window votes (so ``kernel_size``, ``pooling`` and
    ``pooling_window`` apply); ``same_on_every_head`` that its ranking does not depend on the head (so sharing
    positions over heads changes nothing).
    """

    # set from the method's entry in METHODS (a subclass's `method=`)
    name: ClassVar[str]
    description: ClassVar[str]
    accumulates_attention: ClassVar[bool]
    compresses: ClassVar[bool]
    pools_votes: ClassVar[bool]
    default_layer_budgets: ClassVar[str]
    default_head_budgets: ClassVar[str]
    same_on_every_head: ClassVar[bool]

    def __init_subclass__(cls, method: str | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if method is not None:
            for fact in fields(Method):
                setattr(cls, fact.name, getattr(METHODS[method], fact.name))

    def __init__(self, settings: CompressionSettings):
        self.settings = settings
        self.layer_budgets = settings.layer_budgets or self.default_layer_budgets
        self.head_allotment = settings.head_budgets or self.default_head_budgets

    def capacity(self, layer_idx: int, num_layers: int, prompt_length: int) -> int:
        """Tokens this layer keeps per KV head (on average over its heads), window included."""
        return layer_capacity(self.settings, self.layer_budgets, layer_idx, num_layers, prompt_length)

    def scores(self, context: LayerContext) -> torch.Tensor:
        """(batch, kv_heads, prompt_length) float scores; the highest-scoring positions before the window are kept."""
        raise NotImplementedError

    def head_budgets(self, scores: torch.Tensor, capacity: int) -> torch.Tensor:
        """(batch, kv_heads) int64: positions before the window each KV head keeps, summing to heads x (capacity -
        window) per row."""
        window = self.settings.window_size
        return head_prefix_budgets(scores[..., :-window], capacity - window, self.head_allotment,
                                   self.settings.head_floor)

    def ranking(self, context: LayerContext, scores: torch.Tensor, head_budgets: torch.Tensor) -> torch.Tensor:
        """(batch, kv_heads, prompt_length): each head keeps its ``head_budgets`` highest-ranked positions before the
        window. The scores themselves, unless a method ranks by more than the scores."""
        return scores
