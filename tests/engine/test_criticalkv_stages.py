"""CriticalKV's second stage computes ``(score + epsilon) * ||W_o v||_1`` only where it can matter, ordered by a cheap
upper bound: the bound must really bound, and the pruned search must pick what computing every position would."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from snapkv_cli.engine import CompressionSettings
from snapkv_cli.engine.policies.criticalkv import (
    EPSILON,
    CriticalKVPolicy,
    critical_ranking,
    per_query_head_weights,
    projected_value_norm_bounds,
    projected_value_norms,
    second_stage,
)

KV_HEADS, GROUP, HEAD_DIM, HIDDEN = 2, 3, 8, 24


def problem(positions: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    output_projection = torch.randn(HIDDEN, KV_HEADS * GROUP * HEAD_DIM, generator=generator)
    weights = per_query_head_weights(output_projection, KV_HEADS, HEAD_DIM)
    values = torch.randn(1, KV_HEADS, positions, HEAD_DIM, generator=generator)
    scores = torch.rand(1, KV_HEADS, positions, generator=generator) ** 4  # a few large votes, many small
    return scores, values, weights


def test_the_bound_is_the_formula_and_never_below_the_exact_norm():
    _, values, weights = problem(50, seed=1)
    bounds = projected_value_norm_bounds(values, weights)
    for head in range(KV_HEADS):
        exact = projected_value_norms(values[0, head], weights[head])
        mean_gram = torch.stack([w @ w.T for w in weights[head]]).mean(dim=0)
        by_hand = (values[0, head] @ mean_gram * values[0, head]).sum(-1).sqrt() * HIDDEN ** 0.5 * (1 + 1e-4)
        assert torch.allclose(bounds[0, head], by_hand, rtol=1e-6)
        assert bool((bounds[0, head] >= exact).all()) and bool((bounds[0, head] < 1.6 * exact).all())


def brute_force(scores, values, weights, epsilon):
    exact = torch.empty_like(scores)
    for head in range(KV_HEADS):
        exact[0, head] = (scores[0, head] + epsilon) * projected_value_norms(values[0, head], weights[head])
    return exact


@pytest.mark.parametrize(("positions", "need", "seed"), [(300, 1, 0), (300, 5, 1), (600, 40, 2), (90, 30, 3)])
def test_the_pruned_search_picks_what_computing_everything_picks(positions, need, seed):
    scores, values, weights = problem(positions, seed)
    eligible = torch.ones_like(scores, dtype=torch.bool)
    eligible[..., ::7] = False  # positions the first stage took
    counts = torch.tensor([[need, need + 3]])
    epsilon = 0.01
    found = second_stage(scores, values, weights, eligible, counts, epsilon)
    everything = brute_force(scores, values, weights, epsilon).masked_fill(~eligible, float("-inf"))
    for head in range(KV_HEADS):
        count = int(counts[0, head])
        chosen = set(found[0, head].topk(count).indices.tolist())
        assert chosen == set(everything[0, head].topk(count).indices.tolist())
        computed = torch.isfinite(found[0, head])
        assert torch.allclose(found[0, head][computed], everything[0, head][computed])  # (score + eps) * norm
        assert int(computed.sum()) < int(eligible[0, head].sum()) or positions < 100  # it did prune


def test_a_head_that_needs_nothing_computes_nothing_and_the_next_still_does():
    scores, values, weights = problem(100, seed=5)
    eligible = torch.ones_like(scores, dtype=torch.bool)
    found = second_stage(scores, values, weights, eligible, torch.tensor([[0, 2]]), 0.01)
    assert not bool(torch.isfinite(found[0, 0]).any())
    assert int(torch.isfinite(found[0, 1]).sum()) >= 2


def test_critical_ranking_refuses_a_layer_without_values_or_output_projection():
    for missing in ({"values": None, "output_projection": torch.zeros(2, 2)},
                    {"values": torch.zeros(1, 1, 4, 2), "output_projection": None}):
        with pytest.raises(ValueError, match=r"^CriticalKV needs the layer's values and output projection$"):
            critical_ranking(SimpleNamespace(**missing), torch.zeros(1, 1, 4), torch.tensor([[2]]), 0.01)


def test_the_bound_of_a_zero_value_is_zero_and_tiny_values_stay_tightly_bounded():
    _, values, weights = problem(50, seed=2)
    assert not bool(projected_value_norm_bounds(torch.zeros_like(values), weights).any())
    tiny = values * 1e-3
    bounds = projected_value_norm_bounds(tiny, weights)
    for head in range(KV_HEADS):
        exact = projected_value_norms(tiny[0, head], weights[head])
        assert bool((bounds[0, head] >= exact).all()) and bool((bounds[0, head] < 1.6 * exact).all())


def layer(positions: int, window: int, first_stage: float = 0.5):
    generator = torch.Generator().manual_seed(7)
    settings = CompressionSettings(method="criticalkv", window_size=window, max_capacity_prompt=positions - 1,
                                   critical_first_stage=first_stage)
    context = SimpleNamespace(settings=settings,
                              values=torch.randn(1, 1, positions, HEAD_DIM, generator=generator),
                              output_projection=torch.randn(HIDDEN, GROUP * HEAD_DIM, generator=generator))
    return context, per_query_head_weights(context.output_projection, 1, HEAD_DIM)


def test_a_first_stage_of_one_token_keeps_the_top_vote_whatever_its_value():
    context, _ = layer(12, window=2)
    context.values[0, 0, 3] = 0  # the top vote's value is zero: the second stage alone would never pick it
    scores = torch.full((1, 1, 12), 0.1)
    scores[0, 0, 3] = 0.9
    ranking = critical_ranking(context, scores, torch.tensor([[2]]), epsilon=1e-4)  # first stage: 2 * 0.5 = 1
    assert ranking[0, 0, 3] == float("inf") and int(torch.isinf(ranking[0, 0, :10]).sum()) == 1


def test_criticalkv_adds_one_ten_thousandth_per_window_query_to_every_vote():
    window = 8
    context, weights = layer(40, window=window, first_stage=0.0)
    scores = torch.zeros(1, 1, 40)  # no votes: every second-stage value is epsilon times the projected norm
    ranking = CriticalKVPolicy(context.settings).ranking(context, scores, torch.tensor([[6]]))
    computed = torch.isfinite(ranking[0, 0, :32])
    norms = projected_value_norms(context.values[0, 0, :32], weights[0])
    assert int(computed.sum()) >= 6
    torch.testing.assert_close(ranking[0, 0, :32][computed], (EPSILON * window * norms)[computed], rtol=1e-6,
                               atol=0)
