"""What a SnapKVCache records per layer when it keeps everything (a prompt within the budget, the full method), and
its summary when it holds nothing yet: the numbers every report is built from."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache

from snapkv_cli.engine import CompressionSettings, SnapKVCache, attached
from snapkv_cli.engine import cache as cache_module
from snapkv_cli.engine.layers import BufferedLayer
from snapkv_cli.generation import prefill
from tests.tiny_models import prompt_ids, tiny_model


def filled(settings: CompressionSettings, length: int) -> tuple[torch.nn.Module, SnapKVCache]:
    model = tiny_model("llama")
    cache = SnapKVCache(settings=settings)
    with attached(model), torch.inference_mode():
        prefill(model, prompt_ids(length)[0].tolist(), cache)
    return model, cache


@pytest.mark.parametrize(("method", "capacity"), [("snapkv", 64), ("full", 20)])  # full: the prompt
def test_a_layer_kept_whole_records_every_position_at_its_real_size(method, capacity):
    settings = CompressionSettings(method=method, window_size=4, max_capacity_prompt=64)
    model, cache = filled(settings, 20)
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    layer_bytes = 2 * config.num_key_value_heads * 20 * head_dim * 4  # keys and values, float32
    assert sorted(cache.records) == list(range(config.num_hidden_layers))
    for index, record in cache.records.items():
        assert record.layer == index and record.prompt_length == 20 and not record.sliding
        assert record.capacity == capacity
        assert record.kept_positions.shape == (1, config.num_key_value_heads, 20)
        assert bool((record.kept_positions == torch.arange(20)).all()) and not record.compressed
        assert record.bytes_before == record.bytes_after == layer_bytes
        assert record.kept_per_head().tolist() == [[20] * config.num_key_value_heads]
        assert record.kept_per_head().dtype == torch.long
    summary = cache.summary()
    assert summary["tokens_before"] == summary["tokens_after"] == 20 and summary["compression_ratio"] == 1.0


def test_an_empty_cache_summarises_to_nothing_kept_and_no_compression():
    cache = SnapKVCache(4, 10)
    assert cache.prompt_length == 0
    assert cache.summary() == {"tokens_before": 0, "tokens_after": 0, "tokens_allocated": 0, "bytes_before": 0,
                               "bytes_after": 0, "compression_ratio": 1.0}


def test_settings_or_values_not_both():
    with pytest.raises(ValueError, match=re.escape(
            "pass either settings or individual values (window_size, max_capacity_prompt), not both")):
        SnapKVCache(4, 10, settings=CompressionSettings())


def test_a_compressed_layer_records_its_index_capacity_and_sizes():
    settings = CompressionSettings(method="snapkv", window_size=4, max_capacity_prompt=12)
    model, cache = filled(settings, 30)
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    for index, record in cache.records.items():
        assert record.layer == index and record.capacity == 12 and record.prompt_length == 30 and record.compressed
        assert record.kept_positions.shape == (1, config.num_key_value_heads, 12)
        assert record.bytes_before == 2 * config.num_key_value_heads * 30 * head_dim * 4
        assert record.bytes_after == 2 * config.num_key_value_heads * 12 * head_dim * 4


def test_selection_time_adds_up_over_the_layers(monkeypatch):
    """Each layer's selection is timed from one clock reading to the next: with a clock that advances one second a
    reading, the total is one second per compressed layer (not the last layer's alone)."""
    readings = iter(range(1000))
    monkeypatch.setattr(cache_module, "time", SimpleNamespace(perf_counter=lambda: float(next(readings))))
    model, cache = filled(CompressionSettings(method="snapkv", window_size=4, max_capacity_prompt=12), 30)
    assert all(record.compressed for record in cache.records.values())
    assert cache.selection_seconds == len(cache.records) == model.config.num_hidden_layers


def test_update_hands_transformers_its_extra_arguments_and_buffers_layers_it_adds(monkeypatch):
    """Whatever the attention passes beyond the states and layer (cache_kwargs, positionally or by keyword) reaches
    transformers' DynamicCache.update; a layer added on the way is a BufferedLayer (decoded tokens written in place)."""
    seen, update = [], DynamicCache.update

    def spy(self, key_states, value_states, layer_idx, *args, **kwargs):
        seen.append((layer_idx, args, kwargs))
        return update(self, key_states, value_states, layer_idx, *args, **kwargs)

    monkeypatch.setattr(DynamicCache, "update", spy)
    cache, states = SnapKVCache(4, 10), torch.zeros(1, 2, 5, 8)
    for call in ((0, {"position": 1}), (1,)):
        kwargs = {} if len(call) == 2 else {"cache_kwargs": {"position": 2}}
        with pytest.raises(RuntimeError, match=re.escape("call snapkv_cli.prepare(model)")):  # not prepared
            cache.update(states, states, *call, **kwargs)
    assert seen == [(0, ({"position": 1},), {}), (1, (), {"cache_kwargs": {"position": 2}})]
    assert [type(layer) for layer in cache.layers] == [BufferedLayer, BufferedLayer]


def test_binding_a_config_leaves_a_cache_that_already_holds_layers_alone():
    model = tiny_model("llama")
    cache, states = SnapKVCache(4, 10), torch.ones(1, 2, 5, 8)
    with pytest.raises(RuntimeError):
        cache.update(states, states, 0)
    layers = list(cache.layers)
    cache.bind_config(model.config)
    assert cache.layers == layers and torch.equal(cache.layers[0].keys, states)
    fresh = SnapKVCache(4, 10)
    fresh.bind_config(model.config)  # an empty cache is laid out as the model's config says
    assert len(fresh.layers) == model.config.num_hidden_layers
    assert all(type(layer) is BufferedLayer for layer in fresh.layers)


def test_a_sliding_layer_records_its_own_index():
    model = tiny_model("gemma2")  # layer 0 is a sliding-window layer, kept as stored
    cache = SnapKVCache(settings=CompressionSettings(window_size=4, max_capacity_prompt=12))
    with attached(model), torch.no_grad():
        prefill(model, prompt_ids(40, seed=2)[0].tolist(), cache)
    assert cache.records[0].sliding and all(record.layer == index for index, record in cache.records.items())
