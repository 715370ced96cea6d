"""Attention masks for compressed layers whose cache length is not what the model's own mask assumes.

transformers builds one causal mask per forward, sized by the first layer's cache. Two layouts here break that
assumption, and get a mask of their own through the attention module's ``attention_mask`` input (transformers' own
input to its eager and sdpa attention), replaced per layer by the prepared model's hook:

- Layers of different lengths (PyramidKV's budgets): eager attention adds the mask to the scores, so a mask sized
  for another layer does not even broadcast. Such a layer gets a plain causal mask of its own length.
- Layers whose KV heads keep different numbers of tokens (AdaKV's split): the cache stays one dense
  (batch, kv_heads, slots, head_dim) tensor, as every attention implementation expects, with each head's kept tokens
  first and padding up to the fullest head's count (``slots``); decoded tokens are appended after the slots, for
  every head. The mask has one row per query head and hides each head's padding, so decoding attends over exactly
  each head's kept tokens while the memory allocated is that of ``slots`` tokens per head.

A third case is about speed only: a decoding step's sdpa attention on a CPU in bfloat16 or float16
(:func:`packs_decode_queries`). With no mask, transformers hands PyTorch's CPU flash kernel the query heads with
``enable_gqa``, which in reduced precision takes about six times as long at one query as the same attention run per
KV head (that KV head's queries as the rows); with a mask it runs per KV head. So such a layer gets an all-zero mask
(adding zero changes no score), and the outputs are bit for bit those of the kernel's ``enable_gqa`` path (checked
against it in ``tests/engine/test_masking.py``). In float32 the two paths round differently and run at the same speed,
so float32 keeps the model's own (no) mask.
"""

from __future__ import annotations

import torch

MASKABLE_ATTENTION = ("eager", "sdpa")  # implementations that apply a 4-D additive attention_mask as given
REDUCED_PRECISION = (torch.bfloat16, torch.float16)


def packs_decode_queries(module, query_length: int, model_mask, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether this forward of attention ``module`` is a CPU decoding step in reduced precision under sdpa with
    grouped query heads and no mask: the case where an all-zero mask makes transformers run the attention per KV
    head, bit for bit the same and faster (see the module's docstring)."""
    return (query_length == 1 and model_mask is None and device.type == "cpu" and dtype in REDUCED_PRECISION
            and getattr(module, "num_key_value_groups", 1) > 1
            and getattr(module.config, "_attn_implementation", None) == "sdpa")


class CompressedLayerMask:
    """The additive attention mask of one compressed layer.

    counts: (batch, kv_heads) real tokens at the start of each head's first ``slots`` slots (the rest of those slots
    is padding), or None when every slot is real. group: query heads per KV head.
    """

    headroom = 256

    def __init__(self, counts: torch.Tensor | None = None, slots: int = 0, group: int = 1):
        self.counts, self.slots, self.group = counts, slots, group
        self._row: torch.Tensor | None = None  # (batch or 1, heads or 1, 1, room): the one-query mask, grown as needed

    def allowed(self, query_length: int, key_length: int, device: torch.device) -> torch.Tensor:
        """(batch, query_heads, query_length, key_length) bool (batch and heads 1 without padding): whether key slot
        j is visible to query i.

        The last ``query_length`` keys are this forward's own tokens (causal among themselves); every slot from
        ``slots`` on is a token added after compression; a slot before ``slots`` is visible only if it is real.
        """
        slot = torch.arange(key_length, device=device)
        query = torch.arange(query_length, device=device) + key_length - query_length
        causal = slot[None, :] <= query[:, None]  # (query_length, key_length)
        if self.counts is None:
            return causal[None, None]
        real = (slot < self.counts.to(device)[..., None]) | (slot >= self.slots)  # (batch, kv_heads, key_length)
        return (real[:, :, None, :] & causal).repeat_interleave(self.group, dim=1)

    def mask(self, query_length: int, key_length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The additive mask in ``dtype`` (0 where visible, the dtype's minimum elsewhere).

        Shaped as :meth:`allowed`.
        """
        if query_length == 1:
            return self._one_query(key_length, dtype, device)
        return _additive(self.allowed(query_length, key_length, device), dtype)

    def _one_query(self, key_length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A decoding step's mask: a view into a row built once (and rebuilt when the keys outgrow it)."""
        row = self._row
        if row is None or row.shape[-1] < key_length or row.dtype != dtype or row.device != device:
            self._row = _additive(self.allowed(1, key_length + self.headroom, device), dtype)
        return self._row[..., :key_length]


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)
