"""StreamingLLM: a few attention-sink tokens at the start plus the most recent tokens."""

from __future__ import annotations

import torch

from .base import LayerContext, Policy


class StreamingLLMPolicy(Policy, method="streamingllm"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        batch, kv_heads, length = context.keys.shape[:3]
        recency = torch.arange(length, dtype=torch.float32, device=context.keys.device)
        recency[: self.settings.sink_tokens] = float(length)  # sinks outrank every recent token
        return recency.expand(batch, kv_heads, length)
