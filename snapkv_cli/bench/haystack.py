"""Real English prose for haystacks, with no download: the paragraphs of Python's own documentation topics.

``pydoc_data.topics`` ships with CPython (Python Software Foundation License). Code samples, grammar rules and
short fragments are left out, so what remains is running prose of varied content. The paragraphs are split once,
by a hash of their text, into two disjoint pools: one for tuning settings (``tune``) and one for reported results
(``test``), so no reported haystack ever served to choose a setting.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re

SPLITS = ("test", "tune")


@functools.lru_cache(maxsize=1)
def prose_paragraphs() -> tuple[str, ...]:
    from pydoc_data.topics import topics

    paragraphs = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            lines = block.split("\n")
            if len(block) < 200 or any(line.startswith("   ") for line in lines):
                continue
            text = " ".join(line.strip() for line in lines)
            if ">>>" in text or "::=" in text or "Traceback" in text:
                continue
            paragraphs.append(re.sub(r"\s+", " ", text))
    return tuple(paragraphs)


def split_of(paragraph: str) -> str:
    """The pool a paragraph belongs to: a third of them (by a hash of the text) tune, the rest test."""
    return "tune" if hashlib.sha256(paragraph.encode("utf-8")).digest()[0] % 3 == 0 else "test"


@functools.cache
def split_paragraphs(split: str) -> tuple[str, ...]:
    """The paragraphs of one pool (``test`` or ``tune``), in their original order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    unique = dict.fromkeys(prose_paragraphs())  # a paragraph repeated in two topics counts once
    return tuple(paragraph for paragraph in unique if split_of(paragraph) == split)


def shuffled_paragraphs(split: str, rng: random.Random) -> list[str]:
    """Every paragraph of ``split``'s pool once, in an order drawn from ``rng``."""
    paragraphs = list(split_paragraphs(split))
    rng.shuffle(paragraphs)
    return paragraphs


def haystack(paragraph_count: int, seed: int) -> list[str]:
    """``paragraph_count`` distinct prose paragraphs in a seeded random order (wraps around if more are asked)."""
    paragraphs = list(prose_paragraphs())
    random.Random(seed).shuffle(paragraphs)
    return [paragraphs[i % len(paragraphs)] for i in range(paragraph_count)]


def pages_of_prose(pages: int, paragraphs_per_page: int, fact: str, fact_page: int, seed: int) -> list[str]:
    """The text of ``pages`` headed pages of seeded prose, with ``fact`` as a paragraph in the middle of page
    ``fact_page`` (1-based): the long documents of the tests and of ``tools/bench/make_long_document.py``."""
    prose = haystack(pages * paragraphs_per_page, seed=seed)
    texts = []
    for number in range(pages):
        body = prose[number * paragraphs_per_page:(number + 1) * paragraphs_per_page]
        if number + 1 == fact_page:
            body.insert(paragraphs_per_page // 2, fact)
        texts.append(f"# Notes, part {number + 1}\n\n" + "\n\n".join(body))
    return texts
