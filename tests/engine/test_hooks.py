"""The forward pre-hooks that attach a ``SnapKVCache`` to a model: what they hand the cache and the attention, under
either calling convention (keyword or positional arguments), and how hooks are found and removed."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from snapkv_cli.engine import SnapKVCache, prepare
from snapkv_cli.engine.hooks import _attention_pre_hook, has_forward_hooks, unprepare
from tests.tiny_models import tiny_model

MODEL_MASK, CACHE_MASK = object(), object()


class RecordingCache(SnapKVCache):
    """A SnapKVCache whose observe/attention_mask only record their arguments (and hand back ``mask``)."""

    def __init__(self, mask):
        super().__init__(4, 10)
        self.mask, self.observed, self.mask_requests, self.packed_requests = mask, [], [], []

    def observe(self, module, hidden_states, position_embeddings):
        self.observed.append((module, hidden_states, position_embeddings))

    def attention_mask(self, layer_idx, query_length, model_mask, dtype, device, *, packed_decode=False):
        self.mask_requests.append((layer_idx, query_length, model_mask, dtype, device))
        self.packed_requests.append(packed_decode)
        return self.mask


@pytest.fixture
def attention():
    module = nn.Module()
    module.layer_idx = 3
    return module


def test_keyword_arguments_reach_the_cache_and_the_mask_is_replaced(attention):
    hidden, embeddings = torch.zeros(1, 5, 8, dtype=torch.float64), ("cos", "sin")
    cache = RecordingCache(CACHE_MASK)
    kwargs = {"hidden_states": hidden, "position_embeddings": embeddings, "attention_mask": MODEL_MASK,
              "past_key_values": cache}
    args, new_kwargs = _attention_pre_hook(attention, (), kwargs)
    assert cache.observed == [(attention, hidden, embeddings)]
    assert cache.mask_requests == [(3, 5, MODEL_MASK, torch.float64, hidden.device)]
    assert args == () and new_kwargs["attention_mask"] is CACHE_MASK


def test_positional_arguments_reach_the_cache_and_the_mask_is_replaced_in_place(attention):
    hidden, embeddings = torch.zeros(1, 7, 8), ("cos", "sin")
    cache = RecordingCache(CACHE_MASK)
    args, kwargs = _attention_pre_hook(attention, (hidden, embeddings, MODEL_MASK, "fourth", "fifth"),
                                       {"cache": cache})
    assert cache.observed == [(attention, hidden, embeddings)]
    assert cache.mask_requests == [(3, 7, MODEL_MASK, torch.float32, hidden.device)]
    assert args == (hidden, embeddings, CACHE_MASK, "fourth", "fifth") and "attention_mask" not in kwargs


def test_mixed_arguments_and_no_mask_of_its_own(attention):
    hidden, embeddings = torch.zeros(1, 2, 8), ("cos", "sin")
    cache = RecordingCache(None)  # the model's own mask serves: the hook changes nothing
    assert _attention_pre_hook(attention, (hidden,), {"position_embeddings": embeddings, "cache": cache}) is None
    assert cache.observed == [(attention, hidden, embeddings)] and cache.mask_requests[0][2] is None
    cache = RecordingCache(CACHE_MASK)  # positional hidden states and embeddings, the mask as a keyword
    args, kwargs = _attention_pre_hook(attention, (hidden, embeddings), {"attention_mask": MODEL_MASK, "cache": cache})
    assert cache.observed == [(attention, hidden, embeddings)] and cache.mask_requests[0][2] is MODEL_MASK
    assert args == (hidden, embeddings) and kwargs["attention_mask"] is CACHE_MASK
    cache = RecordingCache(CACHE_MASK)  # a third positional argument, but the mask given by keyword: that one counts
    args, kwargs = _attention_pre_hook(attention, (hidden, embeddings, "third"),
                                       {"attention_mask": MODEL_MASK, "cache": cache})
    assert cache.mask_requests[0][2] is MODEL_MASK
    assert args == (hidden, embeddings, "third") and kwargs["attention_mask"] is CACHE_MASK


def test_exactly_three_positional_arguments_carry_the_mask(attention):
    hidden, embeddings = torch.zeros(1, 3, 8), ("cos", "sin")
    cache = RecordingCache(CACHE_MASK)
    args, kwargs = _attention_pre_hook(attention, (hidden, embeddings, MODEL_MASK), {"cache": cache})
    assert cache.mask_requests[0][2] is MODEL_MASK
    assert args == (hidden, embeddings, CACHE_MASK) and "attention_mask" not in kwargs


def test_arguments_left_to_their_defaults_are_none(attention):
    """Llama's and Gemma's attention give position_embeddings and attention_mask defaults: a call may omit them."""
    hidden, embeddings = torch.zeros(1, 3, 8), ("cos", "sin")
    cache = RecordingCache(None)
    assert _attention_pre_hook(attention, (hidden,), {"cache": cache}) is None
    assert cache.observed == [(attention, hidden, None)] and cache.mask_requests[0][2] is None
    cache = RecordingCache(CACHE_MASK)
    args, kwargs = _attention_pre_hook(attention, (hidden, embeddings), {"cache": cache})
    assert cache.observed == [(attention, hidden, embeddings)] and cache.mask_requests[0][2] is None
    assert args == (hidden, embeddings) and kwargs["attention_mask"] is CACHE_MASK


def test_another_cache_leaves_the_call_alone(attention):
    assert _attention_pre_hook(attention, (torch.zeros(1, 2, 8),), {"past_key_values": object()}) is None


def test_an_unpadded_two_dimensional_mask_is_accepted():
    model = prepare(tiny_model("llama"))
    input_ids = torch.randint(3, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids, attention_mask=torch.ones_like(input_ids), past_key_values=SnapKVCache(4, 10), use_cache=True)
        padded = torch.ones_like(input_ids)
        padded[0, 0] = 0
        with pytest.raises(ValueError) as caught:
            model(input_ids, attention_mask=padded, past_key_values=SnapKVCache(4, 10), use_cache=True)
    assert str(caught.value) == ("padded batches are not supported by SnapKVCache: run one prompt at a time "
                                 "(or batch equal-length prompts)")


def test_has_forward_hooks_names_every_hooked_module_and_global_hooks():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
    assert has_forward_hooks(model) == []
    handles = [model.register_forward_pre_hook(lambda *a: None), model[1][0].register_forward_hook(lambda *a: None)]
    assert has_forward_hooks(model) == ["<model>", "1.0"]
    for handle in handles:
        handle.remove()
    for register in (nn.modules.module.register_module_forward_pre_hook,
                     nn.modules.module.register_module_forward_hook):
        handle = register(lambda *a: None)
        try:
            assert has_forward_hooks(model) == ["<global>"]
        finally:
            handle.remove()


def test_unprepare_of_a_model_never_prepared_does_nothing():
    model = nn.Linear(2, 2)
    unprepare(model)
    assert has_forward_hooks(model) == []
