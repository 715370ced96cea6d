"""PyramidKV: SnapKV scores, with budgets that shrink with depth (an arithmetic sequence, same mean).

The allotment itself lives in :func:`snapkv_cli.engine.allotment.layer_capacity` (``layer_budgets="pyramid"``), so
any other method can use it too.
"""

from __future__ import annotations

import torch

from .base import LayerContext, Policy
from .snapkv import pooled_window_votes


class PyramidKVPolicy(Policy, method="pyramidkv"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        return pooled_window_votes(context)
