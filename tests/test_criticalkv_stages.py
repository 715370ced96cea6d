"""CriticalKV's second stage computes ``(score + epsilon) * ||W_o v||_1`` only where it can matter, ordered by a cheap
upper bound: the bound must really bound, and the pruned search must pick what computing every position would."""

from __future__ import annotations

import pytest
import torch

from snapkv_cli.engine.policies.criticalkv import (
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
    from types import SimpleNamespace

    from snapkv_cli.engine.policies.criticalkv import critical_ranking

    for missing in ({"values": None, "output_projection": torch.zeros(2, 2)},
                    {"values": torch.zeros(1, 1, 4, 2), "output_projection": None}):
        with pytest.raises(ValueError, match=r"^CriticalKV needs the layer's values and output projection$"):
            critical_ranking(SimpleNamespace(**missing), torch.zeros(1, 1, 4), torch.tensor([[2]]), 0.01)
