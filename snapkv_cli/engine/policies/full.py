"""No compression: the full prompt cache, for baselines."""

from __future__ import annotations

from .base import Policy


class FullPolicy(Policy, method="full"):
    def capacity(self, layer_idx: int, num_layers: int, prompt_length: int) -> int:
        return prompt_length
