"""Whole words: word ids from token texts, the word-by-word ranking, and a cache that keeps words whole."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from snapkv_cli.engine import CompressionSettings, SnapKVCache, prepare
from snapkv_cli.engine.selection import select_kept_positions
from snapkv_cli.engine.words import MAX_WORD_TOKENS, prompt_word_ids, whole_word_ranking, word_ids
from snapkv_cli.generation import GenerationOptions, build_prefix, generate_answer
from tests.helpers import WordTokenizer
from tests.tiny_models import prompt_ids, tiny_model


def test_a_word_is_a_run_of_tokens_without_space_or_punctuation_between():
    texts = ["The", " code", " is", " ", "9", "5", "7", "0", "5", ".", " Lind", "q", "vist", "'s", "<|im_end|>", "\n"]
    assert word_ids(texts) == [0, 1, 2, 3, 4, 4, 4, 4, 4, 5, 6, 6, 6, 7, 8, 9]


def test_a_long_run_is_cut_into_words_of_at_most_max_word_tokens():
    ids = word_ids(["1"] * (2 * MAX_WORD_TOKENS + 1))
    assert ids == [0] * MAX_WORD_TOKENS + [1] * MAX_WORD_TOKENS + [2]


def test_empty_and_undecodable_tokens_start_words():
    assert word_ids(["", "a", "\ufffd", "b", "c"]) == [0, 1, 2, 3, 3]


def test_prompt_word_ids_decode_each_token(tokenizer):
    ids = tokenizer("pass code 95705.", add_special_tokens=False)["input_ids"]
    words = prompt_word_ids(tokenizer, ids)
    assert words.dtype == torch.int64 and words.shape == (len(ids),)
    assert words.tolist() == word_ids([tokenizer.decode([token]) for token in ids])
    empty = prompt_word_ids(tokenizer, [])  # int64 even with no token to infer it from
    assert empty.dtype == torch.int64 and empty.shape == (0,)


def test_whole_word_ranking_by_hand():
    ranking = torch.tensor([[[0.1, 0.9, 0.2, 0.3, 0.05, 0.4, 0.7, 0.8]]])
    words = torch.tensor([0, 1, 1, 1, 2, 3, 3, 4])  # word 3 runs into the window (the last two positions)
    ordered = whole_word_ranking(ranking, words, prefix_length=6)
    # own ranks before the window: 1, 5, 2, 3, 0, 4; a word's tokens take its best own rank times six, plus their own
    assert ordered.tolist() == [[[1 * 6 + 1, 5 * 6 + 5, 5 * 6 + 2, 5 * 6 + 3, 0, 4 * 6 + 4, -1, -1]]]
    kept = select_kept_positions(ordered, window_size=2, prefix_budgets=torch.tensor([[4]]))
    assert kept.positions[0, 0].tolist() == [1, 2, 3, 5, 6, 7]  # the word of the best token whole, then the next


def test_whole_word_ranking_breaks_ties_by_position_against_a_plain_python_ranking():
    """Tied scores (a word's tokens, a flat head) keep prompt order: a token's own rank sorts by (score, position),
    in plain Python here, for two prompts of a batch and three heads, with word ids that do not start at 0."""
    generator = torch.Generator().manual_seed(5)
    ranking = torch.randint(0, 3, (2, 3, 40), generator=generator).float()  # many ties
    words = torch.tensor(word_ids(["a" if position % 3 else " a" for position in range(40)])) + 7
    prefix_length = 36
    ordered = whole_word_ranking(ranking, words, prefix_length)
    for batch in range(2):
        for head in range(3):
            row = ranking[batch, head, :prefix_length].tolist()
            by_rank = sorted(range(prefix_length), key=lambda position: (row[position], position))
            own = {position: rank for rank, position in enumerate(by_rank)}
            best = {}
            for position in range(prefix_length):
                word = int(words[position])
                best[word] = max(best.get(word, 0), own[position])
            expected = [best[int(words[position])] * prefix_length + own[position] for position in range(prefix_length)]
            assert ordered[batch, head].tolist() == expected + [-1] * (40 - prefix_length)


@hypothesis_settings(max_examples=60, deadline=None)
@given(
    word_lengths=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=30),
    window_size=st.integers(min_value=1, max_value=4),
    seed=st.integers(min_value=0, max_value=2**16),
    data=st.data(),
)
def test_a_head_keeps_words_whole_but_one_at_the_edge_of_its_budget(word_lengths, window_size, seed, data):
    """Whatever the ranking and budget: at most one word before the window is kept in part, its kept tokens are its
    best-ranked ones, and a word kept whole or in part has a better best token than every word left out."""
    words = torch.repeat_interleave(torch.arange(len(word_lengths)), torch.tensor(word_lengths))
    prompt_length = len(words) + window_size
    words = torch.cat([words, words.new_full((window_size,), len(word_lengths))])
    prefix_length = prompt_length - window_size
    ranking = torch.rand(2, 3, prompt_length, generator=torch.Generator().manual_seed(seed))
    budgets = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, prefix_length), min_size=3, max_size=3),
                                              min_size=2, max_size=2)))
    kept = select_kept_positions(whole_word_ranking(ranking, words, prefix_length), window_size, budgets)
    for row in range(2):
        for head in range(3):
            count = int(budgets[row, head])
            chosen = kept.positions[row, head, :count]
            assert bool((chosen[1:] > chosen[:-1]).all()) and bool((chosen < prefix_length).all())
            mask = torch.zeros(prefix_length, dtype=torch.bool)
            mask[chosen] = True
            partial, best_kept, best_left = [], [], []
            for word in range(len(word_lengths)):
                members = (words[:prefix_length] == word).nonzero().flatten()
                held = mask[members]
                best = float(ranking[row, head, members].max())
                (best_kept if held.any() else best_left).append(best)
                if held.any() and not held.all():
                    partial.append(word)
                    scores = ranking[row, head, members]
                    assert float(scores[held].min()) >= float(scores[~held].max())
            assert len(partial) <= 1
            assert min(best_kept, default=2.0) > max(best_left, default=-1.0)


def run(model, tokenizer, ids, settings, **kwargs):
    return generate_answer(model, tokenizer, ids, settings, GenerationOptions(max_new_tokens=4), **kwargs)


def partial_words(cache: SnapKVCache, words: torch.Tensor, window_size: int) -> list[int]:
    """How many words each layer/head keeps in part (before the window)."""
    counts = []
    for record in cache.records.values():
        prefix_length = record.prompt_length - window_size
        for head in range(record.kept_positions.shape[1]):
            mask = torch.zeros(prefix_length, dtype=torch.bool)
            mask[record.head_positions(0, head)[:-window_size]] = True
            prefix_words = words[:prefix_length]
            kept_words = prefix_words[mask].unique()
            counts.append(sum(not bool(mask[prefix_words == word].all()) for word in kept_words))
    return counts


@pytest.mark.parametrize("method", ["snapkv", "defensivekv", "chunkkv", "h2o"])
def test_generation_keeps_words_whole(method):
    model = prepare(tiny_model("llama"))
    ids = prompt_ids(120, seed=3)[0].tolist()
    tokenizer = WordTokenizer()
    words = prompt_word_ids(tokenizer, ids)
    assert 20 < int(words[-1]) < 100  # words of a few tokens, not one token each nor one long run
    settings = CompressionSettings(method=method, window_size=8, max_capacity_prompt=40, kernel_size=5,
                                   whole_words=True)
    whole = run(model, tokenizer, ids, settings)
    assert max(partial_words(whole.cache, words, 8)) <= 1
    tokens = run(model, tokenizer, ids, CompressionSettings(**{**settings.as_dict(), "whole_words": False}))
    assert max(partial_words(tokens.cache, words, 8)) > 1  # token by token, heads cut words (so the test can fail)


def test_a_forked_prefix_keeps_the_same_whole_words():
    model = prepare(tiny_model("llama"))
    tokenizer = WordTokenizer()
    prefix, question = prompt_ids(100, seed=12)[0].tolist(), prompt_ids(12, seed=13)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=40, whole_words=True)
    separate = run(model, tokenizer, prefix + question, settings)
    forked = run(model, tokenizer, prefix + question, settings, prefix=build_prefix(model, prefix, window_size=8))
    for layer, record in separate.cache.records.items():
        assert torch.equal(record.kept_positions, forked.cache.records[layer].kept_positions), layer


def test_a_cache_without_word_ids_says_what_it_needs():
    model = prepare(tiny_model("llama"))
    cache = SnapKVCache(settings=CompressionSettings(window_size=4, max_capacity_prompt=16, whole_words=True))
    message = r"^whole_words needs the prompt's word ids in cache\.word_ids \(generate_answer sets them\)$"
    with pytest.raises(ValueError, match=message), torch.no_grad():
        model(prompt_ids(40, seed=1), past_key_values=cache, use_cache=True)
