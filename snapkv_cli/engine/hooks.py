"""Attach the cache to a model with forward pre-hooks; no model code is forked or patched."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from .cache import SnapKVCache
from .families import check_supported, is_attention_module
from .masking import packs_decode_queries

_HANDLES_ATTRIBUTE = "_snapkv_hook_handles"


def _cache_from(kwargs: dict):
    cache = kwargs.get("cache")
    return cache if cache is not None else kwargs.get("past_key_values")


def _attention_pre_hook(module: nn.Module, args: tuple, kwargs: dict):
    """Let the cache see the layer's inputs; for a compressed layer that needs a mask of its own (padded KV heads, a
    length the model's mask was not built for, or a CPU decoding step in reduced precision that runs faster per KV
    head), hand the attention the cache's mask instead of the model's."""
    cache = _cache_from(kwargs)
    if not isinstance(cache, SnapKVCache):
        return None
    hidden_states = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    position_embeddings = kwargs.get("position_embeddings")
    if position_embeddings is None and len(args) > 1:
        position_embeddings = args[1]
    cache.observe(module, hidden_states, position_embeddings)
    positional = "attention_mask" not in kwargs and len(args) > 2
    model_mask = args[2] if positional else kwargs.get("attention_mask")
    query_length, dtype, device = hidden_states.shape[1], hidden_states.dtype, hidden_states.device
    mask = cache.attention_mask(module.layer_idx, query_length, model_mask, dtype, device,
                                packed_decode=packs_decode_queries(module, query_length, model_mask, dtype, device))
    if mask is None:
        return None
    if positional:
        args = (*args[:2], mask, *args[3:])
    else:
        kwargs["attention_mask"] = mask
    return args, kwargs


def _model_pre_hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
    cache = _cache_from(kwargs)
    if not isinstance(cache, SnapKVCache):
        return
    cache.bind_config(module.config)
    attention_mask = kwargs.get("attention_mask")
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 and not bool(attention_mask.all()):
        raise ValueError(
            "padded batches are not supported by SnapKVCache: run one prompt at a time (or batch equal-length prompts)"
        )


def prepare(model: nn.Module) -> nn.Module:
    """Install the hooks SnapKVCache needs, once; later calls do nothing. Returns the model.

    The hooks do nothing unless a forward is given a :class:`SnapKVCache`, so the prepared model behaves
    exactly as before with any other cache. Raises ``ValueError`` for unsupported model families.
    """
    check_supported(model.config)
    if getattr(model, _HANDLES_ATTRIBUTE, None):
        return model
    handles = [model.register_forward_pre_hook(_model_pre_hook, with_kwargs=True)]
    for submodule in model.modules():
        if is_attention_module(submodule):
            handles.append(submodule.register_forward_pre_hook(_attention_pre_hook, with_kwargs=True))
    setattr(model, _HANDLES_ATTRIBUTE, handles)
    return model


def unprepare(model: nn.Module) -> None:
    """Remove the hooks installed by :func:`prepare`."""
    for handle in getattr(model, _HANDLES_ATTRIBUTE, None) or []:
        handle.remove()
    setattr(model, _HANDLES_ATTRIBUTE, None)


def has_forward_hooks(model: nn.Module) -> list[str]:
    """Names of the modules of ``model`` that carry any forward hook (this project's or anyone's); ``[]`` if none.

    Global hooks (registered for every module) count too, under the name ``"<global>"``.
    """
    from torch.nn.modules import module as torch_module

    names = [name or "<model>" for name, submodule in model.named_modules()
             if submodule._forward_pre_hooks or submodule._forward_hooks]
    if torch_module._global_forward_pre_hooks or torch_module._global_forward_hooks:
        names.append("<global>")
    return names


@contextmanager
def detached(model: nn.Module):
    """``with detached(model): ...`` runs the model without this project's hooks; they come back afterwards if they
    were installed before."""
    installed = bool(getattr(model, _HANDLES_ATTRIBUTE, None))
    unprepare(model)
    try:
        yield model
    finally:
        if installed:
            prepare(model)


@contextmanager
def attached(model: nn.Module):
    """``with attached(model): ...`` prepares the model and always removes the hooks afterwards."""
    already = bool(getattr(model, _HANDLES_ATTRIBUTE, None))
    prepare(model)
    try:
        yield model
    finally:
        if not already:
            unprepare(model)
