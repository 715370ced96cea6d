"""A longer prefix built on the head of an earlier one (a conversation's next turn): it must hold what a prefill of
the longer prefix from its first token holds (keys, values, the window's queries and positions, attention sums), and
the earlier prefix must stay as it was. Heads that cannot be taken are refused with their reason."""

from __future__ import annotations

import re

import pytest
import torch

from snapkv_cli.engine import CompressionSettings, SnapKVCache, attached
from snapkv_cli.generation import build_prefix, prefill
from tests.tiny_models import FAMILIES, prompt_ids, tiny_model

WINDOW = 8


def build(model, ids: list[int], *, sums: bool = False, continuing: SnapKVCache | None = None) -> SnapKVCache:
    with attached(model):
        return build_prefix(model, ids, WINDOW, accumulate_attention=sums, continuing=continuing)


def state(cache: SnapKVCache) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in cache.prefix_state().tensors().items()}


def assert_same_state(built: SnapKVCache, expected: SnapKVCache) -> None:
    got, want = built.prefix_state().tensors(), expected.prefix_state().tensors()
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        assert got[name].shape == tensor.shape, name
        torch.testing.assert_close(got[name], tensor, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("sums", [False, True])
def test_a_whole_prefix_continued_holds_what_the_longer_prefix_holds(sums):
    model = tiny_model("llama")
    ids = prompt_ids(60)[0].tolist()
    earlier = build(model, ids[:40], sums=sums)
    before = state(earlier)
    longer = build(model, ids, sums=sums, continuing=earlier.head(40))
    assert longer.get_seq_length() == 60
    assert_same_state(longer, build(model, ids, sums=sums))
    after = earlier.prefix_state().tensors()
    assert all(torch.equal(after[name], tensor) for name, tensor in before.items())  # the earlier one is intact


@pytest.mark.parametrize("cut", [WINDOW, 25, 39])
def test_a_cut_head_continued_past_a_window_holds_what_a_fresh_prefill_holds(cut):
    """The earlier prefix's last tokens differ from the new one's (the template's end after a document that grew):
    the head ends before them and the continuation, at least a window long, makes the window's queries again."""
    model = tiny_model("llama")
    ids = prompt_ids(60)[0].tolist()
    other_end = ids[:40] + prompt_ids(5, seed=7)[0].tolist()
    earlier = build(model, other_end)
    before = state(earlier)
    longer = build(model, ids[:cut + WINDOW], continuing=earlier.head(cut))
    assert_same_state(longer, build(model, ids[:cut + WINDOW]))
    after = earlier.prefix_state().tensors()
    assert all(torch.equal(after[name], tensor) for name, tensor in before.items())


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_continues_a_whole_prefix(family):
    """Sliding-window layers too: the whole prefix continues as one more prefill chunk would."""
    model = tiny_model(family)
    ids = prompt_ids(48)[0].tolist()
    longer = build(model, ids, continuing=build(model, ids[:30]).head(30))
    fresh = build(model, ids)
    for got, want in zip(longer.layers, fresh.layers, strict=True):
        torch.testing.assert_close(got.keys, want.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.values, want.values, rtol=1e-5, atol=1e-5)


def test_a_continued_prefix_finds_its_own_value_norms():
    """A prefix already forked for CriticalKV holds value norms kept for its questions; the longer one built on it
    selects for CriticalKV as a fresh prefix does."""
    model = tiny_model("llama")
    ids, question = prompt_ids(60)[0].tolist(), prompt_ids(6, seed=3)[0].tolist()
    settings = CompressionSettings(method="criticalkv", window_size=WINDOW, max_capacity_prompt=24)
    earlier = build(model, ids[:40])
    kept = []
    with attached(model), torch.inference_mode():
        prefill(model, question, earlier.fork(settings), start=40)  # the earlier prefix's norms, for 40 tokens
        for prefix in (build(model, ids, continuing=earlier.head(40)), build(model, ids)):
            fork = prefix.fork(settings)
            prefill(model, question, fork, start=60)
            kept.append([fork.records[layer].kept_positions for layer in sorted(fork.records)])
    assert all(torch.equal(a, b) for a, b in zip(*kept, strict=True))


def test_heads_that_cannot_be_taken_are_refused():
    model = tiny_model("llama")
    ids = prompt_ids(40)[0].tolist()
    prefix = build(model, ids)
    for tokens in (0, 41):
        with pytest.raises(ValueError, match="^" + re.escape(f"a head of {tokens} tokens of a 40-token prefix") + "$"):
            prefix.head(tokens)
    assert prefix.can_cut and prefix.head(39).get_seq_length() == 39 and prefix.head(1).get_seq_length() == 1
    with_sums = build(model, ids, sums=True)
    sliding = build(tiny_model("gemma3_text"), ids)
    for cache in (with_sums, sliding):
        assert not cache.can_cut
        with pytest.raises(ValueError, match="^" + re.escape(
                "a prefix with attention sums or sliding-window layers can only be continued whole") + "$"):
            cache.head(39)
        assert cache.head(40).get_seq_length() == 40
    compressed = SnapKVCache(settings=CompressionSettings(method="snapkv", window_size=WINDOW, max_capacity_prompt=24))
    with attached(model), torch.inference_mode():
        prefill(model, ids, compressed)
    with pytest.raises(ValueError, match="^" + re.escape(
            "only an uncompressed prefix (filled inside deferred()) has a head") + "$"):
        compressed.head(10)
