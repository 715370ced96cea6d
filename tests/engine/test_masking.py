"""The additive mask of a compressed layer: causal among the forward's own tokens, each KV head's padding hidden,
in the dtype asked for; a decoding step's one-row mask is rebuilt when the keys outgrow it or the dtype changes."""

from __future__ import annotations

import pytest
import torch

from snapkv_cli.engine import CompressionSettings, SnapKVCache, attached
from snapkv_cli.engine.masking import CompressedLayerMask
from snapkv_cli.generation import prefill
from tests.tiny_models import prompt_ids, tiny_model


def visible(mask: torch.Tensor) -> torch.Tensor:
    return mask == 0


def test_a_plain_layer_gets_a_causal_mask_of_its_own_length():
    mask = CompressedLayerMask().mask(3, 5, torch.float32, torch.device("cpu"))
    assert mask.shape == (1, 1, 3, 5) and mask.dtype == torch.float32
    assert visible(mask)[0, 0].tolist() == [[True, True, True, False, False],
                                            [True, True, True, True, False],
                                            [True, True, True, True, True]]
    assert mask[0, 0, 0, 4] == torch.finfo(torch.float32).min


def test_padding_slots_are_hidden_per_head_and_repeated_for_each_query_head():
    counts = torch.tensor([[2, 3]])  # two KV heads keep 2 and 3 of 3 slots; two query heads each
    layer = CompressedLayerMask(counts, slots=3, group=2)
    mask = layer.mask(2, 6, torch.float16, torch.device("cpu"))  # 3 slots, 1 decoded token, 2 new tokens
    assert mask.shape == (1, 4, 2, 6) and mask.dtype == torch.float16
    head_0 = [[True, True, False, True, True, False], [True, True, False, True, True, True]]
    head_1 = [[True, True, True, True, True, False], [True, True, True, True, True, True]]
    assert visible(mask)[0].tolist() == [head_0, head_0, head_1, head_1]


def test_the_decoding_row_follows_the_keys_and_the_dtype():
    layer = CompressedLayerMask(torch.tensor([[1, 2]]), slots=2, group=1)
    cpu = torch.device("cpu")
    first = layer.mask(1, 4, torch.float32, cpu)
    assert first.shape == (1, 2, 1, 4) and visible(first)[0, :, 0].tolist() == [[True, False, True, True],
                                                                               [True, True, True, True]]
    longer = layer.mask(1, 4 + CompressedLayerMask.headroom + 10, torch.float32, cpu)  # beyond the row's room
    assert longer.shape[-1] == 4 + CompressedLayerMask.headroom + 10 and bool(visible(longer)[..., 2:].all())
    half = layer.mask(1, 4, torch.float16, cpu)
    assert half.dtype == torch.float16 and torch.equal(visible(half), visible(first))
    assert half[0, 0, 0, 1] == torch.finfo(torch.float16).min


def test_decoding_steps_within_the_room_share_one_row():
    """A decoding step costs no allocation: its mask is a view into the row built once, up to its last slot."""
    layer = CompressedLayerMask(torch.tensor([[1, 2]]), slots=2, group=1)
    cpu = torch.device("cpu")
    first = layer.mask(1, 4, torch.float32, cpu)
    room = 4 + CompressedLayerMask.headroom
    for key_length in (5, 100, room):
        step = layer.mask(1, key_length, torch.float32, cpu)
        assert step.shape[-1] == key_length and step.data_ptr() == first.data_ptr()
    assert layer.mask(1, room + 1, torch.float32, cpu).data_ptr() != first.data_ptr()  # outgrown: built again


@pytest.mark.parametrize("query_length", [1, 2, 5])
def test_every_query_count_gets_one_row_per_query(query_length):
    layer = CompressedLayerMask(torch.tensor([[1, 3]]), slots=3, group=1)
    mask = layer.mask(query_length, 8, torch.float32, torch.device("cpu"))
    assert mask.shape == (1, 2, query_length, 8)
    expected = layer.allowed(query_length, 8, torch.device("cpu"))
    assert torch.equal(visible(mask), expected)


def test_a_compressed_layer_keeps_the_models_mask_when_it_fits_its_length():
    """After uniform compression every layer holds 12 tokens: a decoding step's model mask over 13 keys fits and is
    kept (None: nothing to replace); a mask sized for another length is replaced by a causal one of the layer's own."""
    model = tiny_model("llama", "eager")
    cache = SnapKVCache(settings=CompressionSettings(method="snapkv", window_size=4, max_capacity_prompt=12))
    with attached(model), torch.no_grad():
        prefill(model, prompt_ids(30)[0].tolist(), cache)
    cpu = torch.device("cpu")
    assert cache.attention_mask(0, 1, torch.zeros(1, 1, 1, 13), torch.float32, cpu) is None
    assert cache.attention_mask(0, 1, None, torch.float32, cpu) is None
    own = cache.attention_mask(0, 1, torch.zeros(1, 1, 1, 31), torch.float32, cpu)
    assert own.shape == (1, 1, 1, 13) and bool((own == 0).all())


def decode_logits(model, monkeypatch, packed: bool, steps: int = 12) -> tuple[list[torch.Tensor], list]:
    """A SnapKV prefill and greedy decoding steps; the logits of each step and the (query shape, mask) each sdpa
    call of a decoding step got. ``packed=False`` turns the reduced-precision decoding mask off."""
    import snapkv_cli.engine.hooks as hooks

    if not packed:
        monkeypatch.setattr(hooks, "packs_decode_queries", lambda *args: False)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording_sdpa(query, key, value, attn_mask=None, **kwargs):
        if query.shape[-2] * query.shape[1] == model.config.num_attention_heads:  # one query per head: decoding
            calls.append((tuple(query.shape), attn_mask))
        return sdpa(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    cache = SnapKVCache(settings=CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=48))
    ids = prompt_ids(160)[0].tolist()
    logits_per_step = []
    with attached(model), torch.inference_mode():
        logits = prefill(model, ids, cache)
        for step in range(steps):
            token = logits.argmax(dim=-1, keepdim=True)
            position = torch.tensor([len(ids) + step])
            logits = model(token, cache=cache, position_ids=position[None], cache_position=position,
                           use_cache=True).logits[:, -1]
            logits_per_step.append(logits)
    monkeypatch.undo()
    return logits_per_step, calls


def test_a_reduced_precision_decoding_step_runs_per_kv_head_with_the_same_logits(monkeypatch):
    """In bfloat16 on a CPU a decoding step's sdpa gets an all-zero mask, so transformers runs it per KV head (the
    query heads of one KV head as its rows) instead of with enable_gqa: faster, and every logit bit for bit the same
    as without the mask."""
    import copy

    model = copy.deepcopy(tiny_model("llama", "sdpa")).to(torch.bfloat16)
    group = model.config.num_attention_heads // model.config.num_key_value_heads
    packed, packed_calls = decode_logits(model, monkeypatch, packed=True)
    plain, plain_calls = decode_logits(model, monkeypatch, packed=False)
    assert packed_calls and all(shape == (1, model.config.num_key_value_heads, group, 16) and mask is not None
                                and bool((mask == 0).all()) for shape, mask in packed_calls)
    assert plain_calls and all(mask is None for _, mask in plain_calls)  # transformers' own dispatch: enable_gqa
    assert all(torch.equal(a, b) for a, b in zip(packed, plain, strict=True))


@pytest.mark.parametrize("change", [{}, {"dtype": torch.float32}, {"implementation": "eager"}, {"query_length": 2},
                                    {"model_mask": torch.zeros(1, 1, 1, 5)}, {"groups": 1}])
def test_only_a_reduced_precision_cpu_sdpa_decoding_step_without_a_mask_is_packed(change):
    from types import SimpleNamespace

    from snapkv_cli.engine.masking import packs_decode_queries

    module = SimpleNamespace(num_key_value_groups=change.get("groups", 3),
                             config=SimpleNamespace(_attn_implementation=change.get("implementation", "sdpa")))
    packed = packs_decode_queries(module, change.get("query_length", 1), change.get("model_mask"),
                                  change.get("dtype", torch.bfloat16), torch.device("cpu"))
    assert packed is (not change)
