"""TOVA: keep what the last prompt token attends to, heads averaged (a SnapKV window of one query)."""

from __future__ import annotations

import torch

from .base import LayerContext, Policy


class TOVAPolicy(Policy, method="tova"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        last_query = context.window_attention[:, :, :, -1, :]  # (batch, kv_heads, group, prompt_length)
        batch, kv_heads = last_query.shape[:2]
        layer_mean = last_query.mean(dim=(1, 2), keepdim=True).squeeze(2)  # (batch, 1, prompt_length)
        return layer_mean.expand(batch, kv_heads, -1)
