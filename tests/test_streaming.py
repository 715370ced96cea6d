"""The streamed answer never shows half a character: a byte-level tokenizer spends a token per byte of a character
it has no merge for, and the answer may end (the token limit, a loop) between two bytes of one."""

from __future__ import annotations

import pytest

from snapkv_cli.generation.stopping import StopRule
from snapkv_cli.generation.streaming import REPLACEMENT, AnswerText

TEXT = "答えは東京です。Ωμέγα, naïve ☕ ok"


def _byte_ends(tokenizer, ids: list[int]) -> list[int]:
    """How many bytes of the text the first k tokens hold, for every k (a byte-level token's string spells one
    character per byte)."""
    ends = [0]
    for token in tokenizer.convert_ids_to_tokens(ids):
        ends.append(ends[-1] + len(token))
    return ends


@pytest.mark.parametrize("streamed", [True, False])
def test_every_cut_of_a_multibyte_answer_shows_whole_characters_only(tokenizer, streamed):
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    data = TEXT.encode("utf-8")
    ends = _byte_ends(tokenizer, ids)
    assert ends[-1] == len(data)  # the tiny tokenizer is byte-level
    cuts_inside_a_character = 0
    for count in range(len(ids) + 1):
        pieces: list[str] = []
        text = AnswerText(tokenizer, on_text=pieces.append if streamed else None)
        for token in ids[:count]:
            text.add(token)
        answer = text.finish()
        expected = data[:ends[count]].decode("utf-8", errors="ignore")  # the whole characters among those bytes
        cuts_inside_a_character += tokenizer.decode(ids[:count]).endswith(REPLACEMENT)
        assert answer == expected.strip() and text.stop_string is None
        if streamed:
            assert "".join(pieces) == expected and all(pieces)
            assert not any(REPLACEMENT in piece for piece in pieces)
    assert cuts_inside_a_character >= 10  # most cuts inside the Japanese and Greek fall between two bytes


def test_a_stop_string_after_multibyte_text_ends_the_answer_before_it(tokenizer):
    ids = tokenizer.encode("東京です。\n\nQuestion: more", add_special_tokens=False)
    pieces: list[str] = []
    text = AnswerText(tokenizer, StopRule(("\n\n",)), pieces.append)
    stopped = next((count for count, token in enumerate(ids, 1) if text.add(token)), None)
    assert stopped is not None and text.stop_string == "\n\n"
    assert text.finish() == "東京です。" == "".join(pieces)
