"""The exact tensors of a stored prompt prefix, derived from the model's config: what a loaded prefix must match.

A prefix (``generation.build_prefix``: the uncompressed KV of every layer plus what each question's observation
window needs) is exported as named tensors, per layer ``i``:

- ``layers.i.keys``, ``layers.i.values``: (1, kv_heads, prefix_tokens, head_dim), the model's dtype
- ``layers.i.window_queries``: (1, query_heads, window, head_dim), the model's dtype
- ``layers.i.window_positions``: (window,), int64
- ``layers.i.accumulated_attention`` (H2O only): (1, kv_heads, query_heads // kv_heads, prefix_tokens), float32

plus ``prefix_ids``: (prefix_tokens,), int64, where window = min(window_size, prefix_tokens).
:func:`check_prefix_tensors` compares a loaded dict with :func:`expected_prefix_layout` before anything is
imported into a cache, so a file of the wrong shape or dtype is refused instead of crashing (or silently
corrupting) the attention.
"""

from __future__ import annotations


class PrefixLayoutMismatch(ValueError):
    """The tensors do not have the names, shapes or dtypes this model's prefix has (the message says which)."""


def expected_prefix_layout(config, dtype, prefix_tokens: int, window_size: int, attention_sums: bool) -> dict:
    """name -> (shape, dtype) of every tensor of a ``prefix_tokens``-token prefix of a model with ``config``
    (a transformers config; its text config is used) run in ``dtype``."""
    import torch

    config = config.get_text_config()
    query_heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or query_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // query_heads
    window = min(window_size, prefix_tokens)
    layout = {"prefix_ids": ((prefix_tokens,), torch.int64)}
    for index in range(config.num_hidden_layers):
        layer = f"layers.{index}."
        layout[layer + "keys"] = ((1, kv_heads, prefix_tokens, head_dim), dtype)
        layout[layer + "values"] = ((1, kv_heads, prefix_tokens, head_dim), dtype)
        layout[layer + "window_queries"] = ((1, query_heads, window, head_dim), dtype)
        layout[layer + "window_positions"] = ((window,), torch.int64)
        if attention_sums:
            layout[layer + "accumulated_attention"] = ((1, kv_heads, query_heads // kv_heads, prefix_tokens),
                                                       torch.float32)
    return layout


def check_prefix_tensors(tensors: dict, layout: dict) -> None:
    """Raise :class:`PrefixLayoutMismatch` unless ``tensors`` has exactly ``layout``'s names, shapes and dtypes."""
    if set(tensors) != set(layout):
        missing, extra = sorted(set(layout) - set(tensors)), sorted(set(tensors) - set(layout))
        raise PrefixLayoutMismatch(f"unexpected tensor names (missing {missing[:3]}, extra {extra[:3]})")
    for name, (shape, dtype) in layout.items():
        tensor = tensors[name]
        where = f"layer {name.split('.')[1]}: " if name.startswith("layers.") else ""
        part = name.rsplit(".", 1)[-1]
        label = "keys/values" if part in ("keys", "values") else part.replace("_", " ")
        if tuple(tensor.shape) != shape:
            raise PrefixLayoutMismatch(f"{where}{label} of shape {tuple(tensor.shape)}, expected {shape}")
        if tensor.dtype != dtype:
            raise PrefixLayoutMismatch(f"{where}{label} of dtype {tensor.dtype}, expected {dtype}")
