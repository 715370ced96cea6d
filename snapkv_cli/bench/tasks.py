"""Synthetic long-context tasks, generated deterministically from a seed: needles hidden in real prose.

Each task is a document, a question and the exact answer string; a model's answer is right when it contains the
answer. Lengths are measured with the model's own tokenizer so that a "4k" task really is about 4k prompt tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .haystack import haystack


@dataclass(frozen=True)
class Task:
    kind: str
    seed: int
    document: str
    question: str
    answer: str
    distractors: tuple[str, ...] = field(default=())
    depth: float | None = None  # where the needle sits, 0 = start, 1 = end
    question_first: bool = False  # the question is also placed before the document

    def is_correct(self, generated: str) -> bool:
        return self.answer in generated


def _fill(tokenizer, target_tokens: int, seed: int, reserved: int) -> list[str]:
    """Prose paragraphs totalling about ``target_tokens - reserved`` tokens."""
    paragraphs, total = [], 0
    for paragraph in haystack(2000, seed):
        count = len(tokenizer(paragraph, add_special_tokens=False)["input_ids"])
        if total + count > target_tokens - reserved:
            break
        paragraphs.append(paragraph)
        total += count
    return paragraphs


def _code(rng: random.Random, digits: int = 5, avoid: set[str] | None = None) -> str:
    while True:
        code = str(rng.randint(10 ** (digits - 1), 10**digits - 1))
        if not avoid or code not in avoid:
            return code


def single_needle(tokenizer, target_tokens: int, depth: float, seed: int) -> Task:
    """One 5-digit pass code at ``depth`` of about ``target_tokens`` tokens of prose."""
    rng = random.Random(f"single-{seed}")
    answer = _code(rng)
    paragraphs = _fill(tokenizer, target_tokens, seed, reserved=120)
    paragraphs.insert(round(depth * len(paragraphs)), f"The secret pass code is {answer}.")
    return Task("single_needle", seed, "\n\n".join(paragraphs), "What is the secret pass code? Answer with the number.",
                answer, depth=depth)
