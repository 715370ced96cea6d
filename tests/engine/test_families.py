"""What the engine reads off an attention module or config: which family, which layers are sliding-window (left
uncompressed), which modules are attention, and the attention's scaling. Checked on described modules of every shape
the supported families take."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from snapkv_cli.engine.families import (
    attention_scaling,
    check_supported,
    is_attention_module,
    is_sliding_layer,
    output_projection,
)


def module(config, layer_idx=0, **attributes):
    return SimpleNamespace(config=SimpleNamespace(**config), layer_idx=layer_idx, **attributes)


@pytest.mark.parametrize(("config", "attributes", "sliding"), [
    ({"layer_types": ["sliding_attention", "full_attention"]}, {}, True),  # Gemma 2/3: per layer
    ({"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 512}, {}, False),
    ({}, {"sliding_window": 4096}, True),  # the module carries its own window
    ({}, {"sliding_window": None}, False),
    ({"sliding_window": 4096}, {}, True),  # Mistral: a window in the config, no switch
    ({"sliding_window": 4096, "use_sliding_window": True}, {}, True),
    ({"sliding_window": 4096, "use_sliding_window": False}, {}, False),  # Qwen2: a window, switched off
    ({"sliding_window": None, "use_sliding_window": True}, {}, False),
    ({}, {}, False),  # Llama: none
])
def test_sliding_layers_by_every_convention(config, attributes, sliding):
    assert is_sliding_layer(module(config, **attributes)) is sliding


def test_attention_modules_are_recognised_by_index_projections_and_head_size():
    assert is_attention_module(SimpleNamespace(layer_idx=0, q_proj=1, head_dim=8))
    assert is_attention_module(SimpleNamespace(layer_idx=0, qkv_proj=1, head_dim=8))  # Phi-3's fused projection
    assert not is_attention_module(SimpleNamespace(q_proj=1, head_dim=8))
    assert not is_attention_module(SimpleNamespace(layer_idx=0, head_dim=8))
    assert not is_attention_module(SimpleNamespace(layer_idx=0, q_proj=1))


def test_attention_scaling_is_the_modules_own_or_the_inverse_square_root_of_the_head_size():
    assert attention_scaling(SimpleNamespace(head_dim=64)) == 0.125
    assert attention_scaling(SimpleNamespace(head_dim=64, scaling=0.5)) == 0.5  # Gemma's query_pre_attn_scalar


def test_a_config_without_a_family_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^model family None is not supported; supported families: "):
        check_supported(SimpleNamespace())


def test_the_output_projection_is_o_projs_weight_or_none():
    from torch import nn

    attention = nn.Module()
    assert output_projection(attention) is None  # no o_proj at all
    attention.o_proj = nn.Identity()
    assert output_projection(attention) is None  # an o_proj without a weight
    attention.o_proj = nn.Linear(6, 4, bias=False)
    assert output_projection(attention) is attention.o_proj.weight


def test_an_int8_output_projection_is_read_as_the_weights_it_stands_for():
    """Under ``--quantize int8`` the output projection holds int8 data and scales (torchao): CriticalKV reads the
    float weights they stand for, within int8 rounding of the original."""
    import copy

    import torch
    from torchao import quantization

    from tests.tiny_models import tiny_model

    attention = copy.deepcopy(tiny_model("llama").model.layers[0].self_attn)
    original = attention.o_proj.weight.detach().clone()
    quantization.quantize_(attention.o_proj, quantization.Int8WeightOnlyConfig())
    assert getattr(attention.o_proj.weight, "qdata", None) is not None
    weight = output_projection(attention)
    assert type(weight) is torch.Tensor and weight.dtype == torch.float32 and weight.shape == original.shape
    torch.testing.assert_close(weight, original, rtol=0, atol=float(original.abs().max()) / 100)
