"""ChunkKV's order by hand: chunks ranked by summed votes (a short last chunk scaled to a full one's length, ties
to the earlier chunk), tokens within a chunk by their own vote relative to their head's largest, the window last."""

from __future__ import annotations

import torch

from snapkv_cli.engine.policies.chunkkv import chunk_ranking


def test_chunks_rank_by_summed_votes_and_tokens_within_by_their_own():
    head_0 = [1.0, 0.0, 0.0, 4.0, 4.0, 0.0, 2.0, 9.0, 9.0]  # chunks of 3: sums 1, 8, and the short last one 2 * 3 = 6
    head_1 = [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 0.0, 9.0, 9.0]  # chunk sums 6, 6 (a tie: the earlier ranks first), 0
    scores = torch.tensor([[head_0, head_1], [head_1, head_0]])  # a second row: rows are ranked on their own
    ranking = chunk_ranking(scores, prefix_length=7, chunk_size=3)
    assert ranking.shape == (2, 2, 9) and ranking.dtype == torch.float64
    expected_0 = [1 + 1 / 8, 1, 1, 3 + 4 / 8, 3 + 4 / 8, 3, 2 + 2 / 8, 0, 0]  # standing + vote / (2 * max vote)
    expected_1 = [3 + 2 / 4, 3 + 2 / 4, 3 + 2 / 4, 2 + 2 / 4, 2 + 2 / 4, 2 + 2 / 4, 1, 0, 0]
    assert torch.allclose(ranking[0, 0], torch.tensor(expected_0, dtype=torch.float64))
    assert torch.allclose(ranking[0, 1], torch.tensor(expected_1, dtype=torch.float64))
    assert torch.equal(ranking[1], ranking[0].flip(0))


def test_an_all_zero_head_keeps_its_chunk_order_without_dividing_by_zero():
    ranking = chunk_ranking(torch.zeros(1, 1, 6), prefix_length=6, chunk_size=2)
    assert ranking[0, 0].tolist() == [3.0, 3.0, 2.0, 2.0, 1.0, 1.0]


def test_many_tied_chunks_keep_their_order():
    """Past about a hundred elements an unstable sort reorders ties: the order must stay earliest chunk first."""
    ranking = chunk_ranking(torch.ones(1, 2, 300), prefix_length=296, chunk_size=2)
    standing = ranking[..., :296:2].floor()
    assert standing[0, 0].tolist() == list(range(148, 0, -1)) and torch.equal(standing[0, 0], standing[0, 1])


def test_a_short_last_chunk_is_scaled_in_double_precision():
    """Three votes of 1 in a last chunk of 3 (of chunk size 10) are worth exactly 10, one full chunk's worth of ones:
    less than a full chunk two ten-millionths above that (10/3 in single precision rounds up, which would make the
    short chunk worth 10.0000005 and rank it first)."""
    votes = torch.tensor([[[1.0] * 9 + [1.0 + 2e-7] + [1.0] * 3 + [0.0] * 2]], dtype=torch.float64)
    ranking = chunk_ranking(votes, prefix_length=13, chunk_size=10)
    assert ranking[0, 0, :10].floor().tolist() == [2.0] * 10 and ranking[0, 0, 10:13].floor().tolist() == [1.0] * 3
