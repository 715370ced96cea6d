"""Synthetic long-context tasks, generated deterministically from a seed: needles hidden in real prose.

Each task is a document, a question and the answer strings; a model's answer is right when it contains every one
of them. Lengths are measured with the model's own tokenizer so a "4k" task really is about 4k prompt tokens.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from .haystack import haystack

_KEYS = ("amber", "cobalt", "crimson", "emerald", "indigo", "ivory", "jade", "saffron", "scarlet", "silver",
         "teal", "violet")
_VARIABLES = ("ALPHA", "BRAVO", "CEDAR", "DELTA", "EMBER", "FJORD", "GLYPH", "HAVEN", "IONIC", "JUNO")


@dataclass(frozen=True)
class Task:
    kind: str
    seed: int
    document: str
    question: str
    answers: tuple[str, ...]
    distractors: tuple[str, ...] = field(default=())
    depth: float | None = None  # where the (first) needle sits: 0 = start, 1 = end

    @property
    def answer(self) -> str:
        return ", ".join(self.answers)

    def is_correct(self, generated: str) -> bool:
        return all(answer in generated for answer in self.answers)


def _fill(tokenizer, target_tokens: int, seed: int, reserved: int) -> list[str]:
    """Prose paragraphs totalling about ``target_tokens - reserved`` tokens."""
    paragraphs, total, room = [], 0, target_tokens - reserved
    for paragraph in haystack(2000, seed):
        count = len(tokenizer(paragraph, add_special_tokens=False)["input_ids"])
        if total + count <= room:  # a paragraph too long for what is left is skipped, a shorter one may fit
            paragraphs.append(paragraph)
            total += count
        if room - total < 40:
            break
    return paragraphs


def _codes(rng: random.Random, count: int) -> list[str]:
    codes: list[str] = []
    while len(codes) < count:
        code = str(rng.randint(10_000, 99_999))
        if code not in codes:
            codes.append(code)
    return codes


def _insert(paragraphs: list[str], sentences: list[str], depths: list[float]) -> str:
    """Insert each sentence at its depth (fraction of the paragraphs), keeping their order stable."""
    placed = sorted(zip(depths, range(len(sentences)), sentences), reverse=True)
    paragraphs = list(paragraphs)
    for depth, _, sentence in placed:
        paragraphs.insert(round(depth * len(paragraphs)), sentence)
    return "\n\n".join(paragraphs)


def single_needle(tokenizer, target_tokens: int, depth: float, seed: int) -> Task:
    """One 5-digit pass code at ``depth`` in about ``target_tokens`` tokens of prose."""
    rng = random.Random(f"single-{seed}")
    (answer,) = _codes(rng, 1)
    document = _insert(_fill(tokenizer, target_tokens, seed, 120), [f"The secret pass code is {answer}."], [depth])
    return Task("single_needle", seed, document, "What is the secret pass code? Answer with the number.",
                (answer,), depth=depth)


def question_first(tokenizer, target_tokens: int, depth: float, seed: int) -> Task:
    """The single needle, but the question comes before the document and the prompt ends with a generic request.

    The observation window then holds no trace of the question: SnapKV's known weak spot.
    """
    task = single_needle(tokenizer, target_tokens - 20, depth, seed)
    document = "Question: What is the secret pass code? Answer with the number.\n\n" + task.document
    return Task("question_first", seed, document, "Answer the question asked at the start of the document.",
                task.answers, depth=depth)


def multi_key(tokenizer, target_tokens: int, depth: float, seed: int, keys: int = 4) -> Task:
    """Several pass codes for differently coloured doors; the question asks for one of them."""
    rng = random.Random(f"multi-key-{seed}")
    colours = rng.sample(_KEYS, keys)
    codes = _codes(rng, keys)
    depths = [depth] + [rng.random() for _ in range(keys - 1)]
    sentences = [f"The pass code for the {colour} door is {code}." for colour, code in zip(colours, codes)]
    document = _insert(_fill(tokenizer, target_tokens, seed, 40 * keys + 80), sentences, depths)
    question = f"What is the pass code for the {colours[0]} door? Answer with the number."
    return Task("multi_key", seed, document, question,
                (codes[0],), distractors=tuple(codes[1:]), depth=depth)


def multi_value(tokenizer, target_tokens: int, depth: float, seed: int, values: int = 3) -> Task:
    """One key with several values spread through the document; all must be recalled."""
    rng = random.Random(f"multi-value-{seed}")
    colour = rng.choice(_KEYS)
    codes = _codes(rng, values)
    depths = sorted([depth] + [rng.random() for _ in range(values - 1)])
    sentences = [f"One of the pass codes for the {colour} door is {code}." for code in codes]
    document = _insert(_fill(tokenizer, target_tokens, seed, 40 * values + 80), sentences, depths)
    return Task("multi_value", seed, document,
                f"What are all the pass codes for the {colour} door? Answer with the numbers.", tuple(codes),
                depth=depth)


def variable_tracking(tokenizer, target_tokens: int, depth: float, seed: int, hops: int = 2) -> Task:
    """A value passed along a chain of variables (RULER-style); every variable of the chain must be named."""
    rng = random.Random(f"variables-{seed}")
    names = rng.sample(_VARIABLES, hops + 2)
    value, decoy = _codes(rng, 2)
    chain = [f"VAR {names[0]} = {value}."] + [f"VAR {names[i + 1]} = VAR {names[i]}." for i in range(hops)]
    sentences = chain + [f"VAR {names[-1]} = {decoy}."]
    depths = sorted([depth] + [rng.random() for _ in range(len(sentences) - 1)])  # the chain stays in order
    document = _insert(_fill(tokenizer, target_tokens, seed, 30 * len(sentences) + 80), sentences, depths)
    return Task("variable_tracking", seed, document,
                f"Which variables are assigned the value {value}, directly or through another variable? "
                "Answer with their names.", tuple(names[: hops + 1]), distractors=(names[-1],), depth=depth)


TASKS: dict[str, Callable[..., Task]] = {
    "single_needle": single_needle,
    "multi_key": multi_key,
    "multi_value": multi_value,
    "variable_tracking": variable_tracking,
    "question_first": question_first,
}


def make_tasks(tokenizer, kind: str, target_tokens: int, samples: int, seed: int = 0) -> list[Task]:
    """``samples`` tasks of ``kind``, their needle depths spread evenly from 5% to 95%."""
    depths = [0.05 + 0.9 * i / max(1, samples - 1) for i in range(samples)]
    return [TASKS[kind](tokenizer, target_tokens, depth, seed * 1000 + i) for i, depth in enumerate(depths)]
