"""PyramidKV: SnapKV scores, with budgets that shrink with depth (an arithmetic sequence, same mean)."""

from __future__ import annotations

import torch

from .base import LayerContext, Policy
from .snapkv import pooled_window_votes


class PyramidKVPolicy(Policy):
    name = "pyramidkv"
    description = "SnapKV scores with per-layer budgets decreasing with depth"

    def capacity(self, layer_idx: int, num_layers: int, prompt_length: int) -> int:
        """Layer budgets form a decreasing arithmetic sequence whose mean is the requested budget.

        The shallowest layer keeps about twice the requested tokens beyond the window, the deepest
        ``1 / pyramid_beta`` of them; never more than the prompt.
        """
        window = self.settings.window_size
        mean_extra = self.settings.capacity_for(prompt_length) - window
        smallest = mean_extra // self.settings.pyramid_beta
        largest = min(2 * mean_extra - smallest, prompt_length - window)
        smallest = 2 * mean_extra - largest
        if num_layers == 1:
            return mean_extra + window
        step = (largest - smallest) / (num_layers - 1)
        return int(round(largest - layer_idx * step)) + window

    def scores(self, context: LayerContext) -> torch.Tensor:
        return pooled_window_votes(context)
