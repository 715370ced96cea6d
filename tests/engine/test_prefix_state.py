"""An uncompressed prefix (what the document cache stores and every question forks): which tensors describe it,
that they rebuild it exactly, which caches cannot be exported or forked (each refused with its reason), and the
layout a model's config implies for them, with the exact reason of a mismatch."""

from __future__ import annotations

import re

import pytest
import torch

from snapkv_cli.engine import CompressionSettings, SnapKVCache, attached
from snapkv_cli.engine.prefix_state import (
    PrefixLayoutMismatch,
    PrefixState,
    check_layout,
    check_window_positions,
)
from snapkv_cli.generation import build_prefix, prefill
from tests.tiny_models import prompt_ids, tiny_model

WINDOW = 8
SNAPKV = CompressionSettings(method="snapkv", window_size=WINDOW, max_capacity_prompt=24)


def prefix_of(family: str, *, sums: bool = False, length: int = 40) -> tuple[torch.nn.Module, SnapKVCache]:
    model = tiny_model(family)
    with attached(model):
        return model, build_prefix(model, prompt_ids(length)[0].tolist(), WINDOW, accumulate_attention=sums)


@pytest.mark.parametrize("sums", [False, True])
def test_the_state_names_every_part_of_every_layer_and_rebuilds_the_prefix(sums):
    model, prefix = prefix_of("llama", sums=sums)
    state = prefix.prefix_state().tensors()
    parts = ["keys", "values", "window_queries", "window_positions"] + (["accumulated_attention"] if sums else [])
    layers = model.config.num_hidden_layers
    assert list(state) == [f"layers.{index}.{part}" for index in range(layers) for part in parts]
    assert state["layers.1.keys"] is prefix.layers[1].keys  # the cache's own tensors, not copies
    assert prefix.prefix_state().attention_sums is sums
    handed = prefix.prefix_state()
    rebuilt = SnapKVCache.from_prefix_state(handed, model.config, WINDOW, device="cpu")
    assert handed.layers == []  # taken out of the state as they were moved in
    assert rebuilt.prefix_state().tensors().keys() == state.keys()
    assert all(torch.equal(rebuilt.prefix_state().tensors()[name], tensor) for name, tensor in state.items())
    method = "h2o" if sums else "snapkv"
    settings = CompressionSettings(method=method, window_size=WINDOW, max_capacity_prompt=24)
    question = prompt_ids(6, seed=3)[0].tolist()
    kept = []
    for source in (prefix, rebuilt):
        fork = source.fork(settings)
        assert fork.accumulate_attention is sums
        with attached(model), torch.inference_mode():
            prefill(model, question, fork, start=40)
        kept.append([fork.records[layer].kept_positions for layer in range(layers)])
    assert all(torch.equal(a, b) for a, b in zip(*kept))


def test_a_compressed_cache_is_neither_exported_nor_forked():
    model = tiny_model("llama")
    cache = SnapKVCache(settings=SNAPKV)
    with attached(model), torch.inference_mode():
        prefill(model, prompt_ids(40)[0].tolist(), cache)
    with pytest.raises(ValueError, match="^" + re.escape(
            "only an uncompressed prefix (filled inside deferred()) has a prefix state") + "$"):
        cache.prefix_state()
    with pytest.raises(ValueError, match="^" + re.escape(
            "only an uncompressed prefix (filled inside deferred()) can be forked") + "$"):
        cache.fork()


def test_a_method_that_needs_attention_sums_needs_a_prefix_that_kept_them():
    _, prefix = prefix_of("llama")
    with pytest.raises(ValueError, match=re.escape(
            "method 'h2o' needs attention sums: build the prefix with accumulate_attention=True")):
        prefix.fork(CompressionSettings(method="h2o", window_size=WINDOW, max_capacity_prompt=24))


def test_a_sliding_window_prefix_forks_but_is_not_exported():
    model, prefix = prefix_of("gemma3_text")
    fork = prefix.fork(SNAPKV)  # its sliding layers are stored as they are: still a prefix to continue
    with attached(model), torch.inference_mode():
        prefill(model, prompt_ids(6, seed=3)[0].tolist(), fork, start=40)
    assert any(not record.sliding for record in fork.records.values())
    with pytest.raises(ValueError, match=r"^the model has sliding-window layers, whose prefix cannot be exported$"):
        prefix.prefix_state()


def test_a_cache_whose_every_layer_slides_was_never_compressed_and_forks():
    import transformers

    from tests.tiny_models import COMMON

    torch.manual_seed(0)
    config = transformers.MistralConfig(**COMMON, sliding_window=64)  # every layer a sliding-window layer
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    cache = SnapKVCache(settings=SNAPKV)
    with attached(model), torch.inference_mode():
        prefill(model, prompt_ids(40)[0].tolist(), cache)
    assert cache.records and all(record.sliding for record in cache.records.values())
    assert cache.fork().get_seq_length() == 40  # nothing was compressed: the whole prompt continues


def test_a_cache_laid_out_but_never_filled_has_no_prefix_to_export():
    cache = SnapKVCache(settings=SNAPKV, config=tiny_model("llama").config)
    assert cache.layers  # laid out by the config, but no forward ran
    with pytest.raises(ValueError, match=re.escape("layer 0 has no window queries: prefill the prefix first")):
        cache.prefix_state()


@pytest.mark.parametrize("sums", [False, True])
def test_a_state_is_read_back_from_its_tensors_leaving_the_others(sums):
    """``from_tensors`` takes exactly the state's tensors out of a dict that holds others beside them (the document
    cache's token ids); every layer's parts come back in their fields."""
    model, prefix = prefix_of("llama", sums=sums)
    beside = torch.arange(40)
    tensors = {"prefix_ids": beside, **prefix.prefix_state().tensors()}
    state = PrefixState.from_tensors(tensors, model.config, sums)
    assert tensors == {"prefix_ids": beside}
    assert len(state.layers) == model.config.num_hidden_layers and state.attention_sums is sums
    assert all(layer.keys is original.keys and layer.window_positions is original.window_positions
               and layer.accumulated_attention is original.accumulated_attention
               for layer, original in zip(state.layers, prefix.prefix_state().layers, strict=True))
    with pytest.raises(KeyError, match=re.escape("layers.0.accumulated_attention")):  # asked for sums the tensors lack
        PrefixState.from_tensors(prefix_of("llama")[1].prefix_state().tensors(), model.config, True)


def test_the_layout_comes_from_the_text_config_and_its_own_head_size():
    """A composite (vision and text) config is laid out by its text part; an explicit head size wins over
    hidden size / heads; a config without grouped-query attention or a head size (GPT-2's) has as many KV heads as
    query heads and hidden size / heads per head. Shapes worked out by hand."""
    from transformers import GPT2Config, LlamaConfig, LlavaConfig

    text = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1, head_dim=4)
    for config in (text, LlavaConfig(text_config=text.to_dict())):
        assert PrefixState.layout(config, torch.float16, 10, 6, True) == {
            "layers.0.keys": ((1, 2, 10, 4), torch.float16),
            "layers.0.values": ((1, 2, 10, 4), torch.float16),
            "layers.0.window_queries": ((1, 4, 6, 4), torch.float16),
            "layers.0.window_positions": ((6,), torch.int64),
            "layers.0.accumulated_attention": ((1, 2, 2, 10), torch.float32),
        }
    gpt2 = GPT2Config(n_embd=32, n_head=4, n_layer=2)
    layout = PrefixState.layout(gpt2, torch.float32, 5, 8, True)
    assert sorted(layout) == sorted([f"layers.{i}.{part}" for i in (0, 1) for part in (
        "keys", "values", "window_queries", "window_positions", "accumulated_attention")])
    assert layout["layers.1.keys"] == ((1, 4, 5, 8), torch.float32)
    assert layout["layers.1.window_queries"] == ((1, 4, 5, 8), torch.float32)  # the window is cut to the prefix
    assert layout["layers.1.accumulated_attention"] == ((1, 4, 1, 5), torch.float32)
    assert sorted(PrefixState.layout(gpt2, torch.float32, 5, 8, False)) == sorted(
        name for name in layout if not name.endswith("accumulated_attention"))


@pytest.mark.parametrize(("family", "sums"), [("llama", True), ("qwen2", False)])
def test_a_built_prefix_has_the_layout_its_config_implies(family, sums):
    model, prefix = prefix_of(family, sums=sums, length=5)  # shorter than the window
    tensors = prefix.prefix_state().tensors()
    check_layout(tensors, PrefixState.layout(model.config, model.dtype, 5, WINDOW, sums))
    check_window_positions(tensors, 5, WINDOW)


def test_a_layout_mismatch_names_the_tensor_and_both_shapes_or_dtypes():
    """The reason is exact: which layer and part (or the tensor stored beside the layers), what the file has and
    what the config implies, in whole numbers; unexpected names list at most three of each kind."""
    from transformers import GPT2Config

    def mismatch(tensors, layout) -> str:
        with pytest.raises(PrefixLayoutMismatch) as info:
            check_layout(tensors, layout)
        return str(info.value)

    def right(layout):
        return {name: torch.zeros(shape, dtype=dtype) for name, (shape, dtype) in layout.items()}

    gpt2 = {"token_ids": ((5,), torch.int64),
            **PrefixState.layout(GPT2Config(n_embd=32, n_head=4, n_layer=2), torch.float32, 5, 3, False)}
    check_layout(right(gpt2), gpt2)  # the layout's own tensors pass
    assert mismatch({**right(gpt2), "layers.1.keys": torch.zeros(1, 4, 5, 7)}, gpt2) == \
        "layer 1: keys/values of shape (1, 4, 5, 7), expected (1, 4, 5, 8)"
    assert mismatch({**right(gpt2), "token_ids": torch.zeros(5, dtype=torch.int32)}, gpt2) == \
        "token ids of dtype torch.int32, expected torch.int64"
    assert mismatch({**right(gpt2), "layers.0.window_positions": torch.zeros(2, dtype=torch.int64)}, gpt2) == \
        "layer 0: window positions of shape (2,), expected (3,)"
    llama = PrefixState.layout(tiny_model("llama").config, torch.float32, 7, 3, True)  # 6 query, 2 KV heads
    assert mismatch({**right(llama), "layers.2.accumulated_attention": torch.zeros(1, 2, 2, 7)}, llama) == \
        "layer 2: accumulated attention of shape (1, 2, 2, 7), expected (1, 2, 3, 7)"
    tensors = right(gpt2)
    for name in ("layers.0.keys", "layers.0.values", "layers.1.keys", "layers.1.values"):
        tensors.pop(name)
    tensors.update({f"extra.{index}": torch.zeros(1) for index in range(4)})
    assert mismatch(tensors, gpt2) == ("unexpected tensor names (missing ['layers.0.keys', 'layers.0.values', "
                                       "'layers.1.keys'], extra ['extra.0', 'extra.1', 'extra.2'])")


def test_window_positions_must_be_the_prefixs_last_ones():
    """Every layer's positions are the prefix's last min(window, prefix) ones; the first layer that differs is
    named."""
    positions = {"token_ids": torch.arange(3), "layers.0.window_positions": torch.arange(7, 10),
                 "layers.1.window_positions": torch.arange(6, 9)}
    with pytest.raises(PrefixLayoutMismatch, match=r"^layer 1: wrong window positions$"):
        check_window_positions(positions, 10, 3)
    check_window_positions({**positions, "layers.1.window_positions": torch.arange(7, 10)}, 10, 3)
    check_window_positions({"layers.0.window_positions": torch.arange(4)}, 4, 32)  # a prefix shorter than the window
    with pytest.raises(PrefixLayoutMismatch, match=r"^layer 0: wrong window positions$"):
        check_window_positions({"layers.0.window_positions": torch.arange(1, 4)}, 4, 32)


def test_a_state_with_a_layer_missing_is_refused():
    model, prefix = prefix_of("llama")
    state = prefix.prefix_state()
    state.layers.pop()
    with pytest.raises(ValueError):
        SnapKVCache.from_prefix_state(state, model.config, WINDOW, device="cpu")
