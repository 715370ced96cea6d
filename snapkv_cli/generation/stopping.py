"""Where an answer ends when the model does not say so itself.

An instruction-tuned model ends its answer with an end-of-turn token. A base model continuing a completion-style
prompt (``Question: ... Answer:``) does not: after the answer it goes on with a blank line, a new ``Question:``, or
another ``<document>``, until the token limit. :class:`StopRule` ends the answer at the first such stop string
(after the answer's first visible character, so leading blank lines do not end an empty answer) and tells the
streaming code how much of the text so far is safe to show (a tail that may be the start of a stop string waits).

A small model also falls into loops, writing the same sentence again and again until the token limit:
:data:`LOOP_RULE` ends such an answer once the loop is certain. :data:`STOP_REASONS` names every way an answer ends.
"""

from __future__ import annotations

from dataclasses import dataclass

# Why an answer ended (the report's ``stop.reason``), as the terminal report says it
STOP_REASONS = {
    "eos": "end of answer",
    "stop_string": "stop string",
    "max_new_tokens": "token limit",
    "repetition": "loop",
}


@dataclass(frozen=True)
class StopRule:
    """Stop strings that end an answer."""

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
        """How much of ``text`` can be shown now: all of it but a tail that could begin a stop string. ``text`` holds
        no stop string yet (:meth:`cut` found none)."""
        start = self._start(text)
        held = 0
        for stop in self.strings:
            for size in range(min(len(stop) - 1, len(text) - start), 0, -1):
                if text.endswith(stop[:size]):
                    held = max(held, size)
                    break
        return len(text) - held


# A completion-style answer ends at a blank line or at the next marker of the prompt's format (prompts/qa_base.txt).
BASE_MODEL_STOP = StopRule(("\n\n", "\nQuestion:", "\nAnswer:", "<document>", "</document>"))


@dataclass(frozen=True)
class RepeatRule:
    """An answer caught in a loop ends: when its last ``ngram`` tokens have already appeared ``earlier`` times in the
    answer (overlapping occurrences count, so a run of one token is a loop too), decoding stops there, after the
    loop's ``earlier + 1``-th turn. A sentence of ``L >= ngram`` tokens said again and again thus ends
    ``earlier * L + ngram`` tokens after it first began.

    :data:`LOOP_RULE`'s values were picked on the default model's answers (256 tokens at most) to 17 questions about
    the two example documents (``examples/``): 15 ended by themselves, 2 ran to the limit, both in loops
    ("1. Marta Lindqvist\n2. Marta Lindqvist\n...", whose turns differ by a number, and "The report also provides a
    detailed report on the company's ..."). Three earlier turns are what spare an answer that repeats itself and
    still ends by itself (one said its sentence three times, then stopped): allowing one or two cut it for every
    n-gram of 4 to 12 tokens. With three, n-grams of 4, 6 and 8 tokens cut both loops (the list after 32-36 tokens,
    the summary after 148-207), 10 only the summary, 12 neither; 8 is the longest that catches both, and the longer
    the n-gram, the less the pieces that recur in a normal answer can meet it (numbers: " 2023" and " 2022" share
    4 tokens, one digit each).
    """

    ngram: int
    earlier: int

    def watch(self) -> LoopWatch:
        """A watch over one answer's tokens, fed one token at a time."""
        return LoopWatch(self)


class LoopWatch:
    """Counts every ``ngram``-token run of an answer as its tokens arrive (one dictionary update per token)."""

    def __init__(self, rule: RepeatRule):
        self.rule = rule
        self.tokens: list[int] = []
        self.seen: dict[tuple[int, ...], int] = {}

    def add(self, token: int) -> tuple[int, ...] | None:
        """Add the answer's next token; the n-gram that has now occurred once more than the rule allows, or None."""
        self.tokens.append(token)
        size = self.rule.ngram
        if len(self.tokens) < size:
            return None
        last = tuple(self.tokens[-size:])
        count = self.seen.get(last, 0) + 1
        self.seen[last] = count
        return last if count > self.rule.earlier else None


# the rule in force unless --no-stop-on-repeat; see RepeatRule for why these values
LOOP_RULE = RepeatRule(ngram=8, earlier=3)
