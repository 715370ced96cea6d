"""Random eviction: a control that any real policy must beat."""

from __future__ import annotations

import torch

from .base import LayerContext, Policy


class RandomPolicy(Policy, method="random"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.settings.seed * 1_000_003 + context.layer_idx)
        shape = context.keys.shape[:3]
        # drawn on the generator's device (the CPU), whatever the default device, so a seed gives the same positions
        # on every device
        return torch.rand(shape, generator=generator, device=generator.device).to(context.keys.device)
