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
