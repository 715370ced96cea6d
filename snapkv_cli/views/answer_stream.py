"""An answer streamed as it is generated, shown as the finished answer reads: stripped at both ends."""

from __future__ import annotations

from typing import TextIO


class AnswerStream:
    """Writes a streamed answer to ``out`` as the stripped answer: leading whitespace dropped, trailing held back."""

    def __init__(self, out: TextIO):
        self.out, self.started, self.held = out, False, ""

    def __call__(self, text: str) -> None:
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        text = self.held + text
        body = text.rstrip()
        self.held = text[len(body):]
        if body:
            self.out.write(body)
            self.out.flush()
