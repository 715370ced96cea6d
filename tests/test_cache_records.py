"""What a SnapKVCache records per layer when it keeps everything (a prompt within the budget, the full method), and
its summary when it holds nothing yet: the numbers every report is built from."""

from __future__ import annotations

import re

import pytest
import torch

from snapkv_cli.engine import CompressionSettings, SnapKVCache, attached
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
    summary = SnapKVCache(4, 10).summary()
    assert summary["tokens_after"] == 0 and summary["tokens_allocated"] == 0
    assert summary["compression_ratio"] == 1.0 and summary["bytes_after"] == 0


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
