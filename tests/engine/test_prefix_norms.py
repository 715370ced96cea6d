"""The projected value norms of a shared prefix are computed once for all the questions asked on it."""

from __future__ import annotations

import torch

from snapkv_cli.engine import CompressionSettings, prepare
from snapkv_cli.engine.policies import criticalkv
from snapkv_cli.generation import prefill
from snapkv_cli.generation.generate import build_prefix
from tests.tiny_models import prompt_ids, tiny_model

PREFIX, QUESTION, WINDOW = 300, 20, 8


def ask_twice(monkeypatch, method: str):
    model = tiny_model("llama")
    prepare(model)
    settings = CompressionSettings(method=method, window_size=WINDOW, max_capacity_prompt=96, kernel_size=5)
    computed: list[torch.Tensor] = []
    real = criticalkv._group_norms

    def counting(values, flat_weights, group):
        computed.append(values)
        return real(values, flat_weights, group)

    monkeypatch.setattr(criticalkv, "_group_norms", counting)
    ids = prompt_ids(PREFIX).tolist()[0]
    question = prompt_ids(QUESTION, seed=1).tolist()[0]
    rows, kept = [], []
    with torch.inference_mode():
        prefix = build_prefix(model, ids, WINDOW)
        for _ in range(2):
            computed.clear()
            fork = prefix.fork(settings)
            prefill(model, question, fork, start=PREFIX)
            rows.append(sum(values.shape[0] for values in computed))
            kept.append([record.kept_positions for _, record in sorted(fork.records.items())])
    return rows, kept


def test_a_second_question_reads_the_prefix_norms_the_first_computed(monkeypatch):
    for method in ("criticalkv", "defensivekv"):
        (first, second), (kept_first, kept_second) = ask_twice(monkeypatch, method)
        layers = tiny_model("llama").config.num_hidden_layers
        kv_heads = tiny_model("llama").config.num_key_value_heads
        assert first > 0
        # the second question computes at most its own positions before the window, on every layer and KV head
        assert second <= layers * kv_heads * (QUESTION - WINDOW) < first
        assert all(torch.equal(a, b) for a, b in zip(kept_first, kept_second, strict=True))
