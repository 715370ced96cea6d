"""SnapKV's 1-D pooling of the votes, by hand: stride 1, padding kernel // 2 on both sides (counted in averages),
or kernel - 1 on the left for the causal window, over the last dimension of any shape."""

from __future__ import annotations

import pytest
import torch

from snapkv_cli.engine.attention import pool_scores

VOTES = torch.tensor([0.0, 3.0, 0.0, 0.0, 6.0])


def test_average_pooling_counts_the_padding():
    assert pool_scores(VOTES, 3, "avgpool").tolist() == pytest.approx([1.0, 1.0, 1.0, 2.0, 2.0])


def test_max_pooling_spreads_each_peak_to_its_neighbours():
    assert pool_scores(VOTES, 3, "maxpool").tolist() == [3.0, 3.0, 3.0, 6.0, 6.0]
    assert pool_scores(VOTES, 5, "maxpool").tolist() == [3.0, 3.0, 6.0, 6.0, 6.0]


def test_the_causal_window_spreads_each_peak_to_the_positions_after_it():
    assert pool_scores(VOTES, 3, "maxpool", "causal").tolist() == [0.0, 3.0, 3.0, 3.0, 6.0]
    assert pool_scores(VOTES, 5, "maxpool", "causal").tolist() == [0.0, 3.0, 3.0, 3.0, 6.0]
    assert pool_scores(VOTES, 3, "avgpool", "causal").tolist() == pytest.approx([0.0, 1.0, 1.0, 1.0, 2.0])


def test_leading_dimensions_are_kept_and_pooled_independently():
    scores = torch.stack([VOTES, VOTES.flip(0)]).reshape(1, 2, 5).expand(3, 2, 5)
    pooled = pool_scores(scores, 3, "maxpool")
    assert pooled.shape == (3, 2, 5)
    assert pooled[2, 0].tolist() == [3.0, 3.0, 3.0, 6.0, 6.0] and pooled[2, 1].tolist() == [6.0, 6.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize("window", ["centered", "causal"])
@pytest.mark.parametrize("pooling", ["avgpool", "maxpool"])
def test_kernel_one_and_no_positions_change_nothing(pooling, window):
    assert pool_scores(VOTES, 1, pooling, window) is VOTES
    empty = torch.zeros(2, 3, 0)
    assert pool_scores(empty, 5, pooling, window) is empty
    single = torch.tensor([[4.0]])
    assert pool_scores(single, 3, pooling, window).tolist() == (
        [[4.0]] if pooling == "maxpool" else [[pytest.approx(4 / 3)]])
