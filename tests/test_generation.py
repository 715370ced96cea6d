"""Generation paths that must not change what is kept: chunked prefill, and a shared prefix forked per question."""

from __future__ import annotations

import pytest
import torch
from tiny_models import prompt_ids, tiny_model

from snapkv_cli.engine import CompressionSettings
from snapkv_cli.generation import build_prefix, generate_answer


class DigitTokenizer:
    """Just enough of a tokenizer for generate_answer on tiny models."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids)


def run(model, ids, settings, **kwargs):
    return generate_answer(model, DigitTokenizer(), ids, settings, max_new_tokens=8, **kwargs)


def assert_same_selection(first, second):
    assert first.generated_ids == second.generated_ids
    assert sorted(first.cache.records) == sorted(second.cache.records)
    for layer, record in first.cache.records.items():
        other = second.cache.records[layer]
        assert torch.equal(record.kept_positions, other.kept_positions), f"layer {layer}"
        if record.scores is not None:
            torch.testing.assert_close(record.scores, other.scores, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3_text", "phi3"])
@pytest.mark.parametrize("method", ["snapkv", "h2o", "pyramidkv"])
@pytest.mark.parametrize("chunk_size", [5, 16, 47])
def test_chunked_prefill_keeps_the_same_positions_and_answer(family, method, chunk_size):
    model = tiny_model(family)
    ids = prompt_ids(120, seed=11)[0].tolist()
    settings = CompressionSettings(method=method, window_size=8, max_capacity_prompt=40, kernel_size=5,
                                   pooling="maxpool")
    assert_same_selection(run(model, ids, settings), run(model, ids, settings, chunk_size=chunk_size))


@pytest.mark.parametrize("family", ["llama", "gemma2"])
@pytest.mark.parametrize("method", ["snapkv", "h2o", "streamingllm"])
def test_forked_prefix_matches_separate_runs_and_stays_intact(family, method):
    model = tiny_model(family)
    prefix = prompt_ids(100, seed=12)[0].tolist()
    questions = [prompt_ids(6, seed=13)[0].tolist(), prompt_ids(20, seed=14)[0].tolist()]
    settings = CompressionSettings(method=method, window_size=12, max_capacity_prompt=48, kernel_size=5)
    shared = build_prefix(model, prefix, window_size=16, accumulate_attention=True)
    before = [layer.keys.clone() for layer in shared.layers]
    for question in questions:
        separate = run(model, prefix + question, settings)
        forked = run(model, prefix + question, settings, prefix=shared, prefix_length=len(prefix))
        assert forked.reused_prefix_tokens == 100
        assert_same_selection(separate, forked)
    assert all(torch.equal(layer.keys, kept) for layer, kept in zip(shared.layers, before))


def test_fork_refuses_a_larger_window_or_missing_attention_sums():
    model = tiny_model("llama")
    shared = build_prefix(model, prompt_ids(30)[0].tolist(), window_size=8)
    with pytest.raises(ValueError, match="window_size >= 16"):
        shared.fork(CompressionSettings(window_size=16, max_capacity_prompt=20))
    with pytest.raises(ValueError, match="accumulate_attention"):
        shared.fork(CompressionSettings(method="h2o", window_size=4, max_capacity_prompt=20))


def test_buffered_layer_writes_in_place_and_grows():
    from snapkv_cli.engine.layers import BufferedLayer

    layer, reference = BufferedLayer(), []
    layer.headroom = 4
    for step in range(11):
        tokens = 3 if step == 0 else 1
        keys = torch.randn(1, 2, tokens, 8)
        reference.append(keys)
        stored, _ = layer.update(keys, keys * 2)
        assert torch.equal(stored, torch.cat(reference, dim=2))
        assert stored.untyped_storage().data_ptr() == layer._key_buffer.untyped_storage().data_ptr()
    assert layer._key_buffer.shape[2] < 13 + 2 * 4  # reallocated only when the room ran out
    kept = torch.randn(1, 2, 5, 8)
    layer.replace_states(kept, kept)
    stored, _ = layer.update(reference[0][:, :, :1], reference[0][:, :, :1])
    assert torch.equal(stored, torch.cat([kept, reference[0][:, :, :1]], dim=2))


def plain_greedy_loop(model, ids: list[int], new_tokens: int):
    """Greedy decoding with transformers' own DynamicCache and the model's own forward, none of this project's hooks:
    written here on purpose, so the comparison below does not run the code it checks."""
    from transformers import DynamicCache

    from snapkv_cli.engine.hooks import detached, has_forward_hooks

    cache, generated = DynamicCache(config=model.config), []
    with detached(model), torch.inference_mode():
        assert has_forward_hooks(model) == []
        logits = model(torch.tensor([ids]), past_key_values=cache, use_cache=True).logits[:, -1]
        for step in range(new_tokens):
            token = logits.argmax(dim=-1, keepdim=True)
            generated.append(int(token))
            if step + 1 < new_tokens:
                logits = model(token, past_key_values=cache, use_cache=True).logits[:, -1]
    return generated, cache


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_preallocated_cache_decodes_token_identically_to_plain_transformers(family):
    """The project's cache without compression (BufferedLayer: decoded tokens written in place, reallocated past its
    headroom) against transformers' concatenating DynamicCache in a plain loop: 300 tokens, the same ones."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    model = tiny_model(family)
    ids = prompt_ids(150, seed=21)[0].tolist()
    settings = CompressionSettings(method="full", window_size=8, max_capacity_prompt=200)
    buffered = generate_answer(model, DigitTokenizer(), ids, settings, max_new_tokens=300, stop_at_eos=False)
    full_layers = [layer for layer in buffered.cache.layers if type(layer).__name__ == "BufferedLayer"]
    assert full_layers and all(layer._key_buffer.shape[2] >= 150 + 299 for layer in full_layers)
    plain_ids, plain_cache = plain_greedy_loop(model, ids, 300)
    assert type(plain_cache) is DynamicCache and type(plain_cache.layers[0]) is DynamicLayer
    assert buffered.generated_ids == plain_ids


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_preallocated_compressed_cache_decodes_token_identically_to_concatenating_one(family, monkeypatch):
    """SnapKV-compressed, buffered layers vs the same compression with transformers' concatenating DynamicLayers."""
    from snapkv_cli.engine import SnapKVCache

    model = tiny_model(family)
    ids = prompt_ids(150, seed=21)[0].tolist()
    settings = CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=40)
    buffered = generate_answer(model, DigitTokenizer(), ids, settings, max_new_tokens=300, stop_at_eos=False)
    assert any(type(layer).__name__ == "BufferedLayer" for layer in buffered.cache.layers)
    monkeypatch.setattr(SnapKVCache, "_use_buffered_layers", lambda self: None)
    concatenating = generate_answer(model, DigitTokenizer(), ids, settings, max_new_tokens=300, stop_at_eos=False)
    assert not any(type(layer).__name__ == "BufferedLayer" for layer in concatenating.cache.layers)
    assert buffered.generated_ids == concatenating.generated_ids


def test_model_dispatched_by_accelerate_compresses_and_answers_the_same(tiny_model_path, tmp_path):
    """A device map (here: two layers offloaded to disk, loaded layer by layer by accelerate's hooks) must not change
    the selection: window queries are recomputed with each layer's own weights, on that layer's device."""
    import transformers

    plain = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
                  "model.layers.1": "disk", "model.layers.2": "disk", "model.norm": "cpu", "lm_head": "cpu"}
    dispatched = transformers.AutoModelForCausalLM.from_pretrained(
        tiny_model_path, device_map=device_map, offload_folder=str(tmp_path)).eval()
    assert getattr(dispatched.model.layers[1].self_attn.q_proj, "_hf_hook", None) is not None
    ids = prompt_ids(120, seed=31)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=40, kernel_size=5, pooling="maxpool")
    reference, result = run(plain, ids, settings), run(dispatched, ids, settings)
    assert all(record.compressed for record in result.cache.records.values())
    assert_same_selection(reference, result)
