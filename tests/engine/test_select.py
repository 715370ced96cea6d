"""``Policy.select``: a method that only scores positions still gets every shared step of the pipeline (its layer's
capacity, head budgets, whole words, shared heads, kept positions laid out with the window last)."""

from __future__ import annotations

import torch

from snapkv_cli.engine import CompressionSettings
from snapkv_cli.engine.policies import LayerContext, Policy

WINDOW, LENGTH = 2, 12
# word of each of the 12 prompt tokens: positions 2-4 and 6-8 are words of three tokens
WORDS = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 3, 4, 5, 6])
# head 0 likes position 3 best, then 9, 0, 2; head 1 likes 6 best, then 9, 4, 3 (no ties)
SCORES = torch.tensor([[[7.0, 1.1, 2.0, 9.0, 1.2, 1.3, 1.4, 1.5, 1.6, 8.0, 5.0, 5.0],
                        [0.1, 0.2, 0.3, 0.4, 0.5, 0.05, 9.0, 0.06, 0.07, 0.8, 5.0, 5.0]]])


class FixedScores(Policy, method="snapkv"):  # SnapKV's facts (uniform budgets), fixed scores

    def scores(self, context: LayerContext) -> torch.Tensor:
        return SCORES


def select(capacity: int = WINDOW + 4, **settings):
    settings = CompressionSettings(window_size=WINDOW, max_capacity_prompt=capacity, **settings)
    keys = torch.zeros(1, 2, LENGTH, 4)
    context = LayerContext(layer_idx=0, num_layers=1, keys=keys, window_queries=keys[:, :, -WINDOW:],
                           window_positions=torch.arange(LENGTH - WINDOW, LENGTH), scaling=1.0, softcap=None,
                           settings=settings, word_ids=WORDS)
    return FixedScores(settings).select(context)


def kept(selection) -> list[list[int]]:
    return selection.kept.positions[0].tolist()


def test_token_by_token_each_head_keeps_its_best_positions_then_the_window():
    selection = select()
    assert selection.capacity == WINDOW + 4 and selection.kept.counts is None
    assert kept(selection) == [[0, 2, 3, 9, 10, 11], [3, 4, 6, 9, 10, 11]]
    assert torch.equal(selection.scores, SCORES)


def test_whole_words_keep_a_words_tokens_with_its_best_one():
    assert kept(select(whole_words=True)) == [[2, 3, 4, 9, 10, 11], [6, 7, 8, 9, 10, 11]]


def test_shared_heads_keep_the_same_positions_each_heads_favourite_first():
    shared = kept(select(head_budgets="shared"))
    assert shared[0] == shared[1]
    assert {3, 6, 9} <= set(shared[0]) and shared[0][-WINDOW:] == [10, 11]


def test_a_capacity_that_covers_the_prompt_selects_nothing():
    selection = select(capacity=LENGTH)
    assert selection.capacity == LENGTH and selection.kept is None and selection.scores is None
