"""AdaKV (Ada-SnapKV, arXiv 2407.11550): SnapKV scores, with the layer's budget split over its KV heads by one top-k.

The split itself lives in :func:`snapkv_cli.engine.allotment.head_prefix_budgets` (``head_budgets="adaptive"``):
every head first keeps its own top ``head_floor`` share, then the rest of the layer's budget goes to the best
positions of any head. Heads then hold different numbers of tokens; the cache pads each layer to its fullest head
and masks the padding out of attention (see :mod:`snapkv_cli.engine.masking`), so the bytes allocated are those of
the fullest head, which the cache's summary reports.
"""

from __future__ import annotations

import torch

from .base import LayerContext, Policy
from .snapkv import pooled_window_votes


class AdaKVPolicy(Policy, method="adakv"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        return pooled_window_votes(context)
