"""The projected value norms of a shared prefix, kept for every question asked on it.

CriticalKV and DefensiveKV rank part of each head's budget by ``||W_o v||_1``, the value as the output projection
sees it (:mod:`snapkv_cli.engine.policies.criticalkv`). Those norms depend on the prefix's values and the model's
weights only, not on the question: a norm computed for one question on a shared prefix (``snapkv ask -Q a -Q b``,
chat, the bench) is the same for the next, so it is computed once and read afterwards. The question's own positions
are computed for each question and not kept.
"""

from __future__ import annotations

import torch


class PrefixValueNorms:
    """One layer's ``||W_o v||_1`` (mean over the KV group's query heads) per KV head and prefix position, filled in
    as questions need them. ``length``: the prefix's tokens."""

    def __init__(self, length: int):
        self.length = length
        self._norms: torch.Tensor | None = None

    def norms(self, values: torch.Tensor) -> torch.Tensor:
        """(batch, kv_heads, min(length, positions)) float32 view, NaN where no question needed the norm yet;
        writing into it keeps a norm for later questions. values: (batch, kv_heads, positions, head_dim)."""
        if self._norms is None:
            self._norms = torch.full((values.shape[0], values.shape[1], self.length), float("nan"),
                                     dtype=torch.float32, device=values.device)
        return self._norms[..., :min(self.length, values.shape[2])]
