"""Compression settings shared by every policy, validated once."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..errors import BudgetTooSmall

POOLINGS = ("avgpool", "maxpool")
POOLING_WINDOWS = ("centered", "causal")
# More tokens than any supported model's context: a fraction that keeps no more than the window even of this many
# tokens cannot work with any model, so it is refused before a model is loaded.
MAX_CONTEXT_TOKENS = 2**24

GQA_AGGREGATIONS = ("mean", "max")

LAYER_BUDGETS = ("uniform", "pyramid")

HEAD_BUDGETS = ("uniform", "adaptive", "shared")


@dataclass(frozen=True)
class CompressionSettings:
    """What to keep of a prompt's KV cache.

    ``max_capacity_prompt`` is the number of prompt tokens each layer and KV head keeps (the
    observation window included), or, when it is a float in (0, 1), that fraction of the prompt.

    The votes are pooled over ``kernel_size`` positions (``pooling``: avgpool or maxpool) in a window
    ``pooling_window``: ``centered`` (SnapKV: ``kernel_size // 2`` positions either side) or ``causal`` (the position
    and the ``kernel_size - 1`` before it, so the tokens that follow a voted phrase share its votes: the code after
    "the pass code is" rather than the prose before it).

    How the budget is shared out, for any scoring method: ``layer_budgets`` ``uniform`` (every layer the same) or
    ``pyramid`` (PyramidKV: decreasing with depth, same mean); ``head_budgets`` ``uniform`` (every KV head the same)
    or ``adaptive`` (AdaKV: one top-k over all KV heads of a layer, each head keeping at least ``head_floor`` of its
    even share) or ``shared`` (every KV head of a layer keeps the same positions, each head's favourites first:
    :func:`snapkv_cli.engine.allotment.shared_ranking`). ``None`` takes the method's own choice (``pyramidkv`` is
    pyramid; ``adakv`` and ``defensivekv`` are adaptive; the rest uniform). ``critical_first_stage`` is CriticalKV's
    share of each head's budget chosen by attention alone (the rest by attention x projected value norm);
    ``chunk_size`` is ChunkKV's chunk length.

    ``whole_words``: every token of a word ranks with the word's best token, so a head keeps numbers and names whole
    (:mod:`snapkv_cli.engine.words`; the cache needs the prompt's word ids, which generation gives it).
    """

    method: str = "snapkv"
    window_size: int = 32
    max_capacity_prompt: int | float = 4096
    kernel_size: int = 5
    pooling: str = "avgpool"
    pooling_window: str = "centered"
    gqa_aggregation: str = "mean"
    sink_tokens: int = 4
    pyramid_beta: int = 20
    layer_budgets: str | None = None
    head_budgets: str | None = None
    head_floor: float = 0.2
    critical_first_stage: float = 0.5
    chunk_size: int = 10
    whole_words: bool = False
    query_block_size: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        from .policies import POLICY_NAMES

        if self.method not in POLICY_NAMES:
            raise ValueError(f"unknown method {self.method!r}: choose one of {', '.join(POLICY_NAMES)}")
        if not isinstance(self.window_size, int) or self.window_size < 1:
            raise ValueError(f"window_size must be a positive integer, got {self.window_size!r}")
        capacity = self.max_capacity_prompt
        if isinstance(capacity, bool) or not isinstance(capacity, (int, float)):
            raise ValueError(f"max_capacity_prompt must be a token count or a fraction, got {capacity!r}")
        if isinstance(capacity, float) and not capacity.is_integer():
            if not 0.0 < capacity < 1.0:
                raise ValueError(
                    f"max_capacity_prompt {capacity} is neither a token count nor a fraction in (0, 1): "
                    "give e.g. 1024 or 0.1"
                )
            if math.ceil(capacity * MAX_CONTEXT_TOKENS) <= self.window_size:
                raise BudgetTooSmall(capacity, math.ceil(capacity * MAX_CONTEXT_TOKENS), self.window_size,
                                     MAX_CONTEXT_TOKENS)
        elif int(capacity) <= self.window_size:
            raise ValueError(
                f"max_capacity_prompt ({int(capacity)}) must exceed window_size ({self.window_size}): "
                "raise the budget or shrink the window"
            )
        if not isinstance(self.kernel_size, int) or self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd integer such as 5 or 7, got {self.kernel_size!r}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}: choose avgpool or maxpool")
        if self.pooling_window not in POOLING_WINDOWS:
            raise ValueError(f"unknown pooling_window {self.pooling_window!r}: choose centered or causal")
        if self.gqa_aggregation not in GQA_AGGREGATIONS:
            raise ValueError(f"unknown gqa_aggregation {self.gqa_aggregation!r}: choose mean or max")
        if self.sink_tokens < 0 or self.pyramid_beta < 1 or self.query_block_size < 1:
            raise ValueError("sink_tokens must be >= 0, pyramid_beta and query_block_size >= 1")
        if self.layer_budgets is not None and self.layer_budgets not in LAYER_BUDGETS:
            raise ValueError(f"unknown layer_budgets {self.layer_budgets!r}: choose uniform or pyramid")
        if self.head_budgets is not None and self.head_budgets not in HEAD_BUDGETS:
            raise ValueError(f"unknown head_budgets {self.head_budgets!r}: choose uniform, adaptive or shared")
        for name in ("head_floor", "critical_first_stage"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a fraction between 0 and 1, got {value!r}")
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {self.chunk_size!r}")
        if not isinstance(self.whole_words, bool):
            raise ValueError(f"whole_words must be True or False, got {self.whole_words!r}")

    @property
    def is_fraction(self) -> bool:
        capacity = self.max_capacity_prompt
        return isinstance(capacity, float) and not capacity.is_integer()

    def capacity_for(self, prompt_length: int) -> int:
        """Tokens each layer/KV head keeps for a prompt of ``prompt_length`` tokens (before per-layer allocation)."""
        if not self.is_fraction:
            return int(self.max_capacity_prompt)
        if prompt_length <= self.window_size:
            return prompt_length  # the whole prompt is the window: nothing to compress
        capacity = math.ceil(self.max_capacity_prompt * prompt_length)
        if capacity <= self.window_size:
            raise BudgetTooSmall(self.max_capacity_prompt, capacity, self.window_size, prompt_length)
        return capacity

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
