"""The speed bench's baseline rows are plain transformers: no hook of this project (or any), transformers' own
DynamicCache and layers, transformers' own generate loop. Each test here fails if that stops being true."""

from __future__ import annotations

import contextlib

import pytest
from transformers.cache_utils import DynamicCache, DynamicLayer

from snapkv_cli.bench import speed
from snapkv_cli.engine import SnapKVCache, prepare, unprepare
from snapkv_cli.engine.hooks import has_forward_hooks
from snapkv_cli.engine.layers import BufferedLayer
from tests.tiny_models import prompt_ids, tiny_model


@pytest.fixture
def prepared_model():
    """The tiny model with this project's hooks installed, as the bench has them for its own rows."""
    model = tiny_model("llama")
    prepare(model)
    yield model
    unprepare(model)


def test_plain_row_runs_without_hooks_and_with_transformers_own_cache(prepared_model, monkeypatch):
    """A probe inside transformers' DynamicCache.update sees, at every layer update of the row, exactly a
    DynamicCache of DynamicLayers and a model without forward hooks; this project's cache never sees a forward."""
    seen = []
    original_update = DynamicCache.update

    def probe(self, *args, **kwargs):
        seen.append((type(self), {type(layer) for layer in self.layers}, has_forward_hooks(prepared_model)))
        return original_update(self, *args, **kwargs)

    def forbidden(self, *args, **kwargs):
        raise AssertionError("SnapKVCache.observe ran inside the plain-transformers row")

    monkeypatch.setattr(DynamicCache, "update", probe)
    monkeypatch.setattr(SnapKVCache, "observe", forbidden)
    assert has_forward_hooks(prepared_model)  # the bench's own rows have them
    ids = prompt_ids(60, seed=3)[0].tolist()
    prefill_s, decode_s, steps, cache = speed.plain_transformers_run(prepared_model, ids, 5)
    layers = prepared_model.config.num_hidden_layers
    assert len(seen) == 5 * layers  # one prefill and four decode forwards, every layer
    assert all(kind is DynamicCache and classes == {DynamicLayer} and hooks == [] for kind, classes, hooks in seen)
    assert steps == 4 and prefill_s > 0 and decode_s > 0 and cache.get_seq_length() == 60 + 4
    assert has_forward_hooks(prepared_model)  # given back afterwards


def test_plain_row_fails_when_the_hooks_stay_installed(prepared_model, monkeypatch):
    monkeypatch.setattr(speed, "detached", lambda model: contextlib.nullcontext(model))
    with pytest.raises(speed.NotPlainTransformers, match="forward hooks"):
        speed.plain_transformers_run(prepared_model, prompt_ids(30)[0].tolist(), 3)


def test_plain_row_fails_with_the_projects_cache(prepared_model, monkeypatch):
    monkeypatch.setattr(speed, "DynamicCache", lambda config: SnapKVCache(config=config))
    with pytest.raises(speed.NotPlainTransformers, match="SnapKVCache"):
        speed.plain_transformers_run(prepared_model, prompt_ids(30)[0].tolist(), 3)


def test_plain_row_fails_with_preallocated_layers(prepared_model, monkeypatch):
    def buffered(config):
        cache = DynamicCache(config=config)
        cache.layers = [BufferedLayer() for _ in cache.layers]
        return cache

    monkeypatch.setattr(speed, "DynamicCache", buffered)
    with pytest.raises(speed.NotPlainTransformers, match="BufferedLayer"):
        speed.plain_transformers_run(prepared_model, prompt_ids(30)[0].tolist(), 3)


def test_plain_row_fails_with_a_foreign_hook(prepared_model):
    handle = prepared_model.model.layers[0].register_forward_hook(lambda module, args, output: None)
    try:
        with pytest.raises(speed.NotPlainTransformers, match=r"model\.layers\.0"):
            speed.plain_transformers_run(prepared_model, prompt_ids(30)[0].tolist(), 3)
    finally:
        handle.remove()
