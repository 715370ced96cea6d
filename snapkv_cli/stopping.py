"""Where an answer ends when the model does not say so itself.

An instruction-tuned model ends its answer with an end-of-turn token. A base model continuing a completion-style
prompt (``Question: ... Answer:``) does not: after the answer it goes on with a blank line, a new ``Question:``, or
another ``<document>``, until the token limit. :class:`StopRule` ends the answer at the first such stop string
(after the answer's first visible character, so leading blank lines do not end an empty answer) and tells the
streaming code how much of the text so far is safe to show (a tail that may be the start of a stop string waits).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StopRule:
    """Stop strings that end an answer; ``name`` is how the report calls the rule."""

    name: str
    strings: tuple[str, ...]

    def _start(self, text: str) -> int:
        """Where the search begins: the first visible character (leading whitespace never ends an answer)."""
        return len(text) - len(text.lstrip())

    def cut(self, text: str) -> tuple[int, str] | None:
        """(where the answer ends, the stop string found there), or None while no stop string has appeared."""
        start = self._start(text)
        found = [(text.find(stop, start), stop) for stop in self.strings]
        found = [(index, stop) for index, stop in found if index >= 0]
        return min(found) if found else None

    def safe_length(self, text: str) -> int:
        """How much of ``text`` can be shown now: all of it but a tail that could begin a stop string."""
        start = self._start(text)
        held = 0
        for stop in self.strings:
            for size in range(min(len(stop) - 1, len(text) - start), 0, -1):
                if text.endswith(stop[:size]):
                    held = max(held, size)
                    break
        return len(text) - held


# A completion-style answer ends at a blank line or at the next marker of the prompt's format (prompts/qa_base.txt).
BASE_MODEL_STOP = StopRule(
    name="blank line or prompt marker",
    strings=("\n\n", "\nQuestion:", "\nAnswer:", "<document>", "</document>"),
)
