"""An uncompressed prefix (what the document cache stores and every question forks): which tensors describe it,
that they rebuild it exactly, and which caches cannot be exported or forked, each refused with its reason."""

from __future__ import annotations

import re

import pytest
import torch

from snapkv_cli.engine import CompressionSettings, SnapKVCache, attached
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
    state = prefix.prefix_state()
    parts = ["keys", "values", "window_queries", "window_positions"] + (["accumulated_attention"] if sums else [])
    layers = model.config.num_hidden_layers
    assert list(state) == [f"layers.{index}.{part}" for index in range(layers) for part in parts]
    rebuilt = SnapKVCache.from_prefix_state(dict(state), model.config, WINDOW, accumulate_attention=sums,
                                            device="cpu")
    assert rebuilt.prefix_state().keys() == state.keys()
    assert all(torch.equal(rebuilt.prefix_state()[name], tensor) for name, tensor in state.items())
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
