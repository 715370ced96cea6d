"""Whole words: a KV head keeps every token of a word it keeps, or (at the edge of its budget) the word's best ones.

Policies rank tokens one by one. This model spells a number one digit per token and a rare name in a few pieces, so
a head can keep the first digits of a pass code and drop the last. With ``whole_words`` every token of a word ranks
with the word's best-ranked token, so the word's other tokens follow it into the cache before any token of a
lower-ranked word. (Short answers, "9695." for 96954, are the most common way the default loses answers at budgets
128 and 256, but on the default model whole words hardly change them: the heads that keep a code mostly keep all of
it already; docs/benchmarks.md, "Whole words".) A word is a run of tokens with no space or punctuation between them
(a token continues the word when its text starts with a letter or digit and the previous token's text ends with
one), cut every :data:`MAX_WORD_TOKENS` tokens so that one long run (an id, a blob) cannot take a head's whole
budget. Which words are kept is still the policy's choice; only their tokens come along.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

MAX_WORD_TOKENS = 12  # a five-digit code is five tokens, a name two to four; longer runs are cut into parts


def word_ids(token_texts: Sequence[str]) -> list[int]:
    """The word each token belongs to (0, 1, ... in prompt order), from each token's decoded text."""
    ids: list[int] = []
    word = length = -1
    previous = ""
    for text in token_texts:
        continues = bool(text) and text[0].isalnum() and bool(previous) and previous[-1].isalnum()
        if not continues or length >= MAX_WORD_TOKENS:
            word, length = word + 1, 0
        ids.append(word)
        length += 1
        previous = text
    return ids


def prompt_word_ids(tokenizer, input_ids: Sequence[int]) -> torch.Tensor:
    """(prompt_length,) int64 word ids of a tokenized prompt (each distinct token decoded once)."""
    texts = {token: tokenizer.decode([token]) for token in set(input_ids)}
    return torch.tensor(word_ids([texts[token] for token in input_ids]), dtype=torch.int64)


def whole_word_ranking(ranking: torch.Tensor, words: torch.Tensor, prefix_length: int) -> torch.Tensor:
    """(batch, kv_heads, prompt_length) int64: the positions before the window ordered word by word, each word at
    the place of its best-ranked token and its tokens in their own order within it; window positions rank last
    (the window is kept anyway).

    ranking: (batch, kv_heads, prompt_length), higher is kept first. words: (>= prefix_length,) int64 word ids,
    non-decreasing, on ranking's device (a word that runs into the window is cut at its start).
    """
    batch, kv_heads, prompt_length = ranking.shape
    prefix_words = words[:prefix_length] - words[0]
    own = ranking[..., :prefix_length].argsort(dim=-1, stable=True).argsort(dim=-1)  # 0 worst ... prefix_length-1
    index = prefix_words.expand(batch, kv_heads, prefix_length)
    best = own.new_zeros(batch, kv_heads, int(prefix_words[-1]) + 1).scatter_reduce(-1, index, own, "amax")
    prefix = best.gather(-1, index) * prefix_length + own
    return torch.cat([prefix, prefix.new_full((batch, kv_heads, prompt_length - prefix_length), -1)], dim=-1)
