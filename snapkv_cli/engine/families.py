"""What differs between model families when the window queries are recomputed.

Every supported family's attention module computes ``q = rope(q_norm?(q_proj(h)))``; Phi-3 fuses q, k and v in
one ``qkv_proj``, Qwen3 and Gemma 3 normalise queries per head, Gemma 2 soft-caps logits. The family's own
``apply_rotary_pos_emb`` (from its modeling module) applies RoPE, so partial rotary (Phi-3) behaves as in the model.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

SUPPORTED_FAMILIES = {
    "llama": "Llama",
    "mistral": "Mistral",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "gemma2": "Gemma 2",
    "gemma3_text": "Gemma 3",
    "phi3": "Phi-3",
}


def check_supported(config) -> None:
    """Raise ``ValueError`` naming the supported families unless ``config`` belongs to one of them."""
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_FAMILIES:
        names = ", ".join(SUPPORTED_FAMILIES.values())
        raise ValueError(f"model family {model_type!r} is not supported; supported families: {names}")


def is_attention_module(module: nn.Module) -> bool:
    """True for the self-attention module of a decoder layer of a supported family."""
    return hasattr(module, "layer_idx") and (hasattr(module, "q_proj") or hasattr(module, "qkv_proj")) and hasattr(
        module, "head_dim"
    )


def is_sliding_layer(module: nn.Module) -> bool:
    """Sliding-window layers (Gemma 2/3 local layers, Mistral/Qwen2 with a sliding window) are left uncompressed."""
    config = module.config
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return layer_types[module.layer_idx] == "sliding_attention"
    return getattr(module, "sliding_window", None) is not None or (
        getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)
    )


def project_queries(
    module: nn.Module, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """Queries exactly as the attention module computes them, RoPE included.

    hidden_states: (batch, tokens, hidden); cos, sin: (batch, tokens, rotary_dim) for those tokens.
    Returns (batch, num_query_heads, tokens, head_dim).
    """
    batch, tokens, _ = hidden_states.shape
    if hasattr(module, "qkv_proj"):
        query_width = module.config.num_attention_heads * module.head_dim
        queries = module.qkv_proj(hidden_states)[..., :query_width]
    else:
        queries = module.q_proj(hidden_states)
    queries = queries.view(batch, tokens, -1, module.head_dim)
    q_norm = getattr(module, "q_norm", None)
    if q_norm is not None:
        queries = q_norm(queries)
    queries = queries.transpose(1, 2)
    apply_rotary_pos_emb = sys.modules[type(module).__module__].apply_rotary_pos_emb
    queries, _ = apply_rotary_pos_emb(queries, queries, cos, sin)
    return queries


def attention_scaling(module: nn.Module) -> float:
    return float(getattr(module, "scaling", module.head_dim**-0.5))


def logit_softcap(module: nn.Module) -> float | None:
    return getattr(module, "attn_logit_softcapping", None)


def output_projection(module: nn.Module) -> torch.Tensor | None:
    """(hidden, query_heads * head_dim) the weight of the attention's output projection ``o_proj`` (every supported
    family's name for it), or None where the module has none or it is not a plain weight (CriticalKV then refuses)."""
    weight = getattr(getattr(module, "o_proj", None), "weight", None)
    if getattr(weight, "qdata", None) is not None:  # quantized (--quantize int8): the weights it stands for
        return weight.dequantize()
    return weight
