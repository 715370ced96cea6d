"""The answer's text as its tokens arrive: decoded, ended at a stop string, streamed in whole characters.

A byte-level tokenizer (SmolLM2's, GPT-2's) spends one token per byte of a character it has no merge for, so a
Japanese or Greek answer often stops, for a token or two, in the middle of a character; decoding those bytes gives
U+FFFD (the replacement character) in its place until the rest arrives. :class:`AnswerText` therefore streams the
text only when it does not end in U+FFFD, and when the answer ends in the middle of a character (at the token limit,
say) it drops that incomplete character instead of showing U+FFFD.
"""

from __future__ import annotations

from collections.abc import Callable

from .stopping import StopRule

REPLACEMENT = "\ufffd"


def whole_characters(text: str) -> str:
    """``text`` without the replacement characters that end it: the decoding of a character whose bytes are not all
    there yet."""
    return text.rstrip(REPLACEMENT)


class AnswerText:
    """The text of an answer decoding token by token: ``add`` each token, ``finish`` once at the end.

    ``rule`` (stop strings) ends the answer before the first stop string; ``on_text`` receives the answer as it
    grows, never a tail that may still become a stop string or the first bytes of a character. Without either the
    tokens are decoded once, in :meth:`finish` (decoding at every step costs quadratic time over a long answer).
    """

    def __init__(self, tokenizer, rule: StopRule | None = None, on_text: Callable[[str], None] | None = None):
        self.tokenizer, self.rule, self.on_text = tokenizer, rule, on_text
        self.ids: list[int] = []
        self.text = ""
        self.emitted = ""
        self.stop_string: str | None = None  # the stop string that ended the answer, if one did
        self.watching = on_text is not None or rule is not None

    def _decode(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def add(self, token_id: int) -> bool:
        """Add the answer's next token; True when a stop string has appeared (the answer ends before it)."""
        self.ids.append(token_id)
        if not self.watching:
            return False
        text = self._decode()
        cut = self.rule.cut(text) if self.rule is not None else None
        if cut is not None:
            self.text, self.stop_string = text[:cut[0]], cut[1]
            return True
        self.text = text
        if self.on_text is not None and not text.endswith(REPLACEMENT):  # wait for the rest of a character
            shown = self.rule.safe_length(text) if self.rule is not None else len(text)
            if shown > len(self.emitted):
                self.on_text(text[len(self.emitted):shown])
                self.emitted = text[:shown]
        return False

    def finish(self) -> str:
        """The answer, stripped and without an incomplete last character; what was held back is streamed now."""
        if not self.watching:
            self.text = self._decode()
        self.text = whole_characters(self.text)
        if self.on_text is not None and len(self.text) > len(self.emitted):
            self.on_text(self.text[len(self.emitted):])
        return self.text.strip()
