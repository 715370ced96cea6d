"""Compressing one layer at the end of the prefill: the policy's context, its selection, the kept keys and values
gathered into the layer, a mask where its heads keep different numbers, and the layer's record."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import UnsupportedAttention
from .families import attention_scaling, logit_softcap, output_projection
from .layers import BufferedLayer
from .masking import MASKABLE_ATTENTION, CompressedLayerMask
from .pending import PendingLayer
from .policies import LayerContext, Policy
from .records import LayerRecord, state_bytes, uncompressed_record
from .selection import gather_positions


def compress_layer(policy: Policy, layer, layer_idx: int, module: nn.Module, keys: torch.Tensor,
                   values: torch.Tensor, pending: PendingLayer, word_ids: torch.Tensor | None
                   ) -> tuple[LayerRecord, CompressedLayerMask | None]:
    """Keep in ``layer`` (the cache's layer ``layer_idx``) what ``policy`` selects of its prompt ``keys``/``values``
    (batch, kv_heads, prompt_length, head_dim); return its record and, where its heads are padded, its mask.

    word_ids: (>= prompt_length,) the prompt's word ids, needed with ``whole_words``.
    Raises :class:`UnsupportedAttention` where heads are padded under an attention that cannot mask them.
    """
    context = LayerContext(
        layer_idx=layer_idx,
        num_layers=module.config.num_hidden_layers,
        keys=keys,
        values=values,
        window_queries=pending.window_queries,
        window_positions=pending.window_positions,
        scaling=attention_scaling(module),
        softcap=logit_softcap(module),
        settings=policy.settings,
        accumulated_attention=pending.accumulated_attention,
        output_projection=output_projection(module),
        word_ids=word_ids,
        value_norms=pending.value_norms,
    )
    selection = policy.select(context)
    prompt_length = keys.shape[2]
    kept = selection.kept
    if kept is None:
        return uncompressed_record(layer_idx, keys, layer, prompt_length, capacity=selection.capacity), None
    mask = None
    if kept.padded:
        implementation = module.config._attn_implementation
        if implementation not in MASKABLE_ATTENTION:
            raise UnsupportedAttention(policy.settings.method, implementation, MASKABLE_ATTENTION)
        group = pending.window_queries.shape[1] // keys.shape[1]
        mask = CompressedLayerMask(kept.counts, kept.positions.shape[-1], group)
    kept_keys, kept_values = gather_positions(keys, kept.positions), gather_positions(values, kept.positions)
    if isinstance(layer, BufferedLayer):
        layer.replace_states(kept_keys, kept_values)
    else:
        layer.keys, layer.values = kept_keys, kept_values
    record = LayerRecord(
        layer=layer_idx,
        prompt_length=prompt_length,
        capacity=selection.capacity,
        kept_positions=kept.positions,
        scores=selection.scores,
        bytes_before=state_bytes(keys, values),
        bytes_after=state_bytes(layer.keys, layer.values),
        kept_counts=kept.counts,
    )
    return record, mask
