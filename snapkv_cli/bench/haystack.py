"""Real English prose for haystacks, with no download: the paragraphs of Python's own documentation topics.

``pydoc_data.topics`` ships with CPython (Python Software Foundation License). Code samples, grammar rules and
short fragments are left out, so what remains is running prose of varied content.
"""

from __future__ import annotations

import functools
import random
import re


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


def haystack(paragraph_count: int, seed: int) -> list[str]:
    """``paragraph_count`` distinct prose paragraphs in a seeded random order (wraps around if more are asked)."""
    paragraphs = list(prose_paragraphs())
    random.Random(seed).shuffle(paragraphs)
    return [paragraphs[i % len(paragraphs)] for i in range(paragraph_count)]
