"""Policy scores against a direct, independent computation from the eager model's own attention weights.

The engine recomputes the observation window's attention from each layer's hidden states and pools it with
PyTorch's pooling; the references here take the attention matrices an eager model returns
(``output_attentions=True``), sum and pool them with plain loops over positions, and reduce the query heads of each
KV group by hand. A policy that pools differently, forgets the pooling, reads the wrong window query or reduces a GQA
group the wrong way disagrees with them.
"""

from __future__ import annotations

import pytest
import torch

from snapkv_cli import CompressionSettings, SnapKVCache, prepare
from tests.tiny_models import prompt_ids, tiny_model

PROMPT_LENGTH, WINDOW, CAPACITY = 72, 8, 24


def run_with_attentions(family: str, settings: CompressionSettings, seed: int = 40):
    """One prefill of an eager tiny model with a compressing cache: (the cache, each layer's attention weights
    (query_heads, prompt, prompt) as the model computed them)."""
    model = prepare(tiny_model(family, "eager"))
    cache = SnapKVCache(settings=settings)
    with torch.no_grad():
        output = model(prompt_ids(PROMPT_LENGTH, seed=seed), past_key_values=cache, use_cache=True,
                       output_attentions=True)
    return cache, [attentions[0].double() for attentions in output.attentions]


def pooled_by_hand(votes: torch.Tensor, kernel_size: int, pooling: str, window: str = "centered") -> torch.Tensor:
    """votes: (heads, positions). Position i pools positions i - k//2 ... i + k//2 (``centered``) or i - k + 1 ... i
    (``causal``); outside the sequence counts as zero (in the average's denominator too: the kernel size)."""
    heads, positions = votes.shape
    before = kernel_size - 1 if window == "causal" else kernel_size // 2
    after = kernel_size - 1 - before
    pooled = torch.zeros_like(votes)
    for head in range(heads):
        for i in range(positions):
            neighbours = [float(votes[head, j]) for j in range(i - before, i + after + 1) if 0 <= j < positions]
            if pooling == "avgpool":
                pooled[head, i] = sum(neighbours) / kernel_size
            else:
                pooled[head, i] = max([*neighbours, 0.0])
    return pooled


def per_kv_head(scores: torch.Tensor, kv_heads: int, how: str) -> torch.Tensor:
    """scores: (query_heads, positions) -> (kv_heads, positions); query head h belongs to KV head h // group."""
    group = scores.shape[0] // kv_heads
    rows = []
    for kv_head in range(kv_heads):
        members = torch.stack([scores[kv_head * group + member] for member in range(group)])
        rows.append(members.mean(dim=0) if how == "mean" else members.max(dim=0).values)
    return torch.stack(rows)


def snapkv_reference(attentions: torch.Tensor, settings: CompressionSettings, kv_heads: int) -> torch.Tensor:
    """SnapKV's scores of one layer from its attention weights (query_heads, prompt, prompt) -> (kv_heads, prompt):
    the window's rows summed over its queries; pooled before the window, raw inside it; then the GQA reduction."""
    window = settings.window_size
    votes = torch.zeros(attentions.shape[0], attentions.shape[2], dtype=attentions.dtype)
    for query in range(attentions.shape[1] - window, attentions.shape[1]):
        votes += attentions[:, query, :]
    prefix = pooled_by_hand(votes[:, :-window], settings.kernel_size, settings.pooling, settings.pooling_window)
    return per_kv_head(torch.cat([prefix, votes[:, -window:]], dim=1), kv_heads, settings.gqa_aggregation)


def assert_kept_are_the_best(record, reference: torch.Tensor, window: int) -> None:
    """Every kept position before the window scores at least as high (by the reference) as every evicted one."""
    prompt_length = reference.shape[-1]
    for head, kept in enumerate(record.kept_positions[0].tolist()):
        before_window = [position for position in kept if position < prompt_length - window]
        evicted = sorted(set(range(prompt_length - window)) - set(before_window))
        assert kept[len(before_window):] == list(range(prompt_length - window, prompt_length))
        if not before_window:  # a layer whose whole budget is the window (PyramidKV's deepest)
            continue
        lowest_kept = float(reference[head, before_window].min())
        highest_evicted = float(reference[head, evicted].max())
        assert lowest_kept >= highest_evicted - 1e-6, (head, lowest_kept, highest_evicted)


@pytest.mark.parametrize("window", ["centered", "causal"])
@pytest.mark.parametrize("pooling", ["avgpool", "maxpool"])
@pytest.mark.parametrize("kernel_size", [1, 5, 15])
@pytest.mark.parametrize("gqa", ["mean", "max"])
def test_snapkv_scores_equal_pooled_window_votes_of_the_eager_attention(pooling, kernel_size, gqa, window):
    settings = CompressionSettings(window_size=WINDOW, max_capacity_prompt=CAPACITY, kernel_size=kernel_size,
                                   pooling=pooling, pooling_window=window, gqa_aggregation=gqa)
    cache, attentions = run_with_attentions("llama", settings)
    kv_heads = tiny_model("llama").config.num_key_value_heads
    for layer, record in cache.records.items():
        reference = snapkv_reference(attentions[layer], settings, kv_heads)
        torch.testing.assert_close(record.scores[0].double(), reference, atol=1e-5, rtol=1e-5)
        assert_kept_are_the_best(record, reference, WINDOW)


@pytest.mark.parametrize("family", ["qwen3", "gemma2", "phi3"])
def test_snapkv_scores_match_the_reference_across_families(family):
    """q-norm (Qwen3), soft-capping and a sliding layer (Gemma 2), fused qkv with partial rotary (Phi-3)."""
    settings = CompressionSettings(window_size=WINDOW, max_capacity_prompt=CAPACITY, kernel_size=5,
                                   pooling="maxpool", gqa_aggregation="max")
    cache, attentions = run_with_attentions(family, settings, seed=41)
    kv_heads = tiny_model(family, "eager").config.num_key_value_heads
    scored = [layer for layer, record in cache.records.items() if record.scores is not None]
    assert scored  # gemma2's sliding layer is not scored, its full layers are
    for layer in scored:
        reference = snapkv_reference(attentions[layer], settings, kv_heads)
        torch.testing.assert_close(cache.records[layer].scores[0].double(), reference, atol=1e-5, rtol=1e-5)


def test_pyramidkv_scores_are_snapkv_scores():
    settings = CompressionSettings(method="pyramidkv", window_size=WINDOW, max_capacity_prompt=CAPACITY,
                                   kernel_size=5, pooling="avgpool")
    cache, attentions = run_with_attentions("llama", settings)
    for layer, record in cache.records.items():
        reference = snapkv_reference(attentions[layer], settings, 2)
        torch.testing.assert_close(record.scores[0].double(), reference, atol=1e-5, rtol=1e-5)
        assert_kept_are_the_best(record, reference, WINDOW)


def test_tova_scores_are_the_last_query_attention_averaged_over_all_heads():
    settings = CompressionSettings(method="tova", window_size=WINDOW, max_capacity_prompt=CAPACITY)
    cache, attentions = run_with_attentions("llama", settings)
    for layer, record in cache.records.items():
        last_row = attentions[layer][:, PROMPT_LENGTH - 1, :]  # (query_heads, prompt)
        reference = (sum(last_row[head] for head in range(last_row.shape[0])) / last_row.shape[0]).expand(2, -1)
        torch.testing.assert_close(record.scores[0].double(), reference, atol=1e-6, rtol=1e-5)
        assert_kept_are_the_best(record, reference, WINDOW)


def test_random_policy_follows_the_seed():
    def kept(seed: int) -> list:
        cache = SnapKVCache(settings=CompressionSettings(method="random", window_size=WINDOW,
                                                         max_capacity_prompt=CAPACITY, seed=seed))
        with torch.no_grad():
            prepare(tiny_model("llama"))(prompt_ids(PROMPT_LENGTH), past_key_values=cache, use_cache=True)
        return [cache.records[layer].kept_positions.tolist() for layer in sorted(cache.records)]

    first = kept(0)
    assert kept(0) == first  # a seed repeats
    others = [kept(seed) for seed in (1, 2, 3)]
    assert all(other != first for other in others) and others[0] != others[1]
    assert first[0] != first[1]  # and each layer draws its own positions
