"""ChunkKV (arXiv 2502.00299): keep whole chunks of consecutive tokens, ranked by their summed window votes.

Token-level selection can keep half of a number or a name; this model spells digits one token each, so a five-digit
code spans five positions. The positions before the window are cut into chunks of ``chunk_size`` tokens from the
start of the prompt; each chunk is worth the sum of its tokens' window votes (the raw votes: the chunk sum replaces
SnapKV's pooling, so ``kernel_size`` and ``pooling`` do not apply; a last, shorter chunk is scaled up to full
length); each head keeps the best chunks whole, and where its budget ends inside a chunk, that chunk's best tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention import aggregate_group
from .base import LayerContext, Policy


def window_votes(context: LayerContext) -> torch.Tensor:
    """(batch, kv_heads, prompt_length) window attention summed over the window queries, reduced over the group."""
    return aggregate_group(context.window_attention.sum(dim=3), context.settings.gqa_aggregation)


def chunk_ranking(scores: torch.Tensor, prefix_length: int, chunk_size: int) -> torch.Tensor:
    """(batch, kv_heads, prompt_length) float64 order: every token of a better chunk before any token of a worse
    one, and within a chunk the higher-scoring token first. Window positions rank last (the window is kept anyway).

    scores: (batch, kv_heads, prompt_length), non-negative.
    """
    batch, kv_heads, prompt_length = scores.shape
    prefix = scores[..., :prefix_length].double()
    chunks = -(-prefix_length // chunk_size)
    padded = F.pad(prefix, (0, chunks * chunk_size - prefix_length)).reshape(batch, kv_heads, chunks, chunk_size)
    lengths = torch.full((chunks,), chunk_size, dtype=torch.float64, device=scores.device)
    lengths[-1] = prefix_length - (chunks - 1) * chunk_size
    worth = padded.sum(dim=-1) * (chunk_size / lengths)
    order = worth.argsort(dim=-1, descending=True, stable=True)
    standing = torch.empty_like(order).scatter_(-1, order, torch.arange(chunks, 0, -1, device=scores.device).expand_as(
        order))  # best chunk: chunks, worst: 1
    chunk_of_token = torch.arange(prefix_length, device=scores.device) // chunk_size
    within = prefix / (2 * prefix.amax(dim=-1, keepdim=True)).clamp_min(torch.finfo(torch.float64).tiny)  # [0, 0.5]
    ranking = standing[..., chunk_of_token].double() + within
    return torch.cat([ranking, ranking.new_zeros(batch, kv_heads, prompt_length - prefix_length)], dim=-1)


class ChunkKVPolicy(Policy, method="chunkkv"):
    def scores(self, context: LayerContext) -> torch.Tensor:
        return window_votes(context)

    def ranking(self, context: LayerContext, scores: torch.Tensor, head_budgets: torch.Tensor) -> torch.Tensor:
        prefix_length = scores.shape[-1] - self.settings.window_size
        return chunk_ranking(scores, prefix_length, self.settings.chunk_size)
