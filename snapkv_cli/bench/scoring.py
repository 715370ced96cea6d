"""Scoring an answer against a task: extract what the answer names, right only with exactly the expected set.

Substring checks let wrong answers pass ("1" + code + "9" contains the code; a list of every code in the document
contains the asked one; "ALPHA" is in "ALPHABET"). Here an answer is reduced to the set of things of the answer's
kind it names, matched on word boundaries and case-insensitively:

- ``code``: every standalone run of digits (``\\b\\d+\\b``) of the codes' length (5 digits). A longer run
  ("1473069", a zero-padded "047306") is another number, not the code; list markers ("1.", "2.") are shorter and
  are not codes.
- ``name``: every standalone word that is one of the task's possible names (the variable vocabulary), upper-cased.

The answer is right when that set equals the expected set: nothing missing, nothing extra, no distractor.
"""

from __future__ import annotations

import re

KINDS = ("code", "name")
_NUMBER = re.compile(r"\b\d+\b")
_WORD = re.compile(r"\b[A-Za-z]+\b")


def extract(text: str, kind: str, vocabulary: tuple[str, ...] = (), code_length: int = 5) -> set[str]:
    """The set of codes (``kind="code"``) or vocabulary names (``kind="name"``, upper case) named in ``text``."""
    if kind == "code":
        return {number for number in _NUMBER.findall(text) if len(number) == code_length}
    if kind == "name":
        names = {name.upper() for name in vocabulary}
        return {word.upper() for word in _WORD.findall(text) if word.upper() in names}
    raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")


def is_correct(text: str, expected: tuple[str, ...], distractors: tuple[str, ...], kind: str,
               vocabulary: tuple[str, ...] = ()) -> bool:
    """Whether ``text`` names exactly the ``expected`` set and none of the ``distractors``."""
    named = extract(text, kind, vocabulary, code_length=len(expected[0]) if kind == "code" else 5)
    wanted = {item.upper() for item in expected}
    return named == wanted and not named & {item.upper() for item in distractors}
