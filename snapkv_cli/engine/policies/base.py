"""A compression policy: one selection pipeline (:meth:`Policy.select`) whose small steps each method overrides.

A method scores prompt positions, and may rank them otherwise or allot a layer or its heads their budgets; the
steps every method shares (whole words, shared heads, picking the kept positions) run once, here. How budgets are
shared out over layers and heads lives in :mod:`snapkv_cli.engine.allotment`; picking and gathering positions in
:mod:`snapkv_cli.engine.selection`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import ClassVar

import torch

from ..allotment import head_prefix_budgets, layer_capacity, shared_ranking
from ..attention import attention_probabilities
from ..methods import METHODS, Method
from ..prefix_norms import PrefixValueNorms
from ..selection import KeptPositions, select_kept_positions
from ..settings import CompressionSettings
from ..words import whole_word_ranking


@dataclass
class LayerContext:
    """What a policy may look at when it selects one layer's kept positions at the end of the prefill.

    layer_idx of num_layers: the layer (its budget may depend on its depth).
    keys: (batch, kv_heads, prompt_length, head_dim), rotated, as the attention saw them.
    values: (batch, kv_heads, prompt_length, head_dim).
    window_queries: (batch, query_heads, window, head_dim), the rotated queries of the last prompt tokens.
    window_positions: (window,) their absolute positions.
    accumulated_attention: (batch, kv_heads, group, prompt_length) attention summed over every prompt query,
        present only for policies that set ``accumulates_attention``.
    output_projection: (hidden, query_heads * head_dim), the weight of the attention's output projection (``o_proj``):
        head ``q``'s output reaches the residual stream through columns ``q * head_dim ... (q + 1) * head_dim``.
    word_ids: (>= prompt_length,) int64 word of each prompt token, on the keys' device; needed with ``whole_words``.
    value_norms: the projected value norms of the shared prefix this prompt continues, kept for every question on it
        (None for a prompt prefilled in one pass).
    """

    layer_idx: int
    num_layers: int
    keys: torch.Tensor
    window_queries: torch.Tensor
    window_positions: torch.Tensor
    scaling: float
    softcap: float | None
    settings: CompressionSettings
    values: torch.Tensor | None = field(default=None)
    accumulated_attention: torch.Tensor | None = field(default=None)
    output_projection: torch.Tensor | None = field(default=None)
    word_ids: torch.Tensor | None = field(default=None)
    value_norms: PrefixValueNorms | None = field(default=None)

    @property
    def prompt_length(self) -> int:
        return self.keys.shape[2]

    @cached_property
    def window_attention(self) -> torch.Tensor:
        """(batch, kv_heads, group, window, prompt_length) float32 attention of the window queries (computed once)."""
        return attention_probabilities(
            self.window_queries, self.keys, self.window_positions, self.scaling, self.softcap
        )


@dataclass
class Selection:
    """What :meth:`Policy.select` chose for one layer.

    capacity: tokens per KV head the layer was allotted (window included). kept: the positions each head keeps, or
    None when the layer keeps its whole prompt (the method does not compress, or the capacity covers the prompt).
    scores: (batch, kv_heads, prompt_length) float32 policy scores, None when nothing was scored.
    """

    capacity: int
    kept: KeptPositions | None = None
    scores: torch.Tensor | None = None


class Policy:
    """Base of every compression policy. A subclass names its method (``class SnapKVPolicy(Policy,
    method="snapkv")``), whose facts in :data:`~snapkv_cli.engine.methods.METHODS` become its class attributes, and
    overrides :meth:`scores`.

    :meth:`select` runs a layer's selection in order: :meth:`capacity` (its tokens per KV head), :meth:`scores` (what
    each position is worth), :meth:`head_budgets` (how the layer's budget is split over its KV heads), :meth:`ranking`
    (the order in which positions are kept; the scores unless the method ranks otherwise), then the steps every
    method shares: whole words (``whole_words``), shared heads (``head_budgets="shared"``) and picking each head's
    kept positions. A method overrides only the first four.
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

    def select(self, context: LayerContext) -> Selection:
        """The positions each KV head of ``context``'s layer keeps, and the scores and capacity they came from."""
        capacity = self.capacity(context.layer_idx, context.num_layers, context.prompt_length)
        if not self.compresses or capacity >= context.prompt_length:
            return Selection(capacity)
        window = self.settings.window_size
        scores = self.scores(context)
        head_budgets = self.head_budgets(scores, capacity)
        ranking = self.ranking(context, scores, head_budgets)
        if self.settings.whole_words:
            ranking = whole_word_ranking(ranking, _word_ids(context), context.prompt_length - window)
        if self.head_allotment == "shared":
            ranking = shared_ranking(ranking, window)
        return Selection(capacity, select_kept_positions(ranking, window, head_budgets), scores.float())

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


def _word_ids(context: LayerContext) -> torch.Tensor:
    words = context.word_ids
    if words is None or words.shape[0] < context.prompt_length:
        raise ValueError("whole_words needs the prompt's word ids in cache.word_ids (generate_answer sets them)")
    return words
