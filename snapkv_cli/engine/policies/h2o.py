"""H2O: heavy hitters by attention accumulated over every prompt query, plus the recent window."""

from __future__ import annotations

import torch

from ..attention import aggregate_group
from .base import LayerContext, Policy


class H2OPolicy(Policy, method="h2o"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        return aggregate_group(context.accumulated_attention, self.settings.gqa_aggregation)
