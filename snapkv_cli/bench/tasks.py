"""Synthetic long-context tasks, generated deterministically from a seed: needles hidden in real prose.

Each task is a document, a question and the expected answer set; :mod:`.scoring` decides whether an answer is
right. Documents are sized against the final prompt: the template, the chat formatting, the separators and the
question all count, and a task's prompt never exceeds ``max_prompt_tokens`` (the caller passes at most the model's
context minus the tokens kept for the answer).

Every (split, task, length, sample) has its own seed, so the samples of one cell, the lengths of one sample and the
tasks of one sample draw different codes, needles and haystacks. The ``tune`` and ``test`` splits draw their
haystacks from disjoint paragraph pools (:mod:`.haystack`) and their codes from disjoint sets (a multiple of 4 is a
tune code), so settings chosen on ``tune`` were never chosen on a reported sample.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..answering.documents import Document, Page
from ..answering.prompting import Template, build_prompt
from ..errors import UserError
from . import docqa
from .haystack import SPLITS, shuffled_paragraphs
from .scoring import extract, is_correct

_KEYS = ("amber", "cobalt", "crimson", "emerald", "indigo", "ivory", "jade", "saffron", "scarlet", "silver",
         "teal", "violet")
VARIABLES = ("ALPHA", "BRAVO", "CEDAR", "DELTA", "EMBER", "FJORD", "GLYPH", "HAVEN", "IONIC", "JUNO")

# Tokens each task's answer may take by default: a code is 5 single-digit tokens here, a list of three codes with
# their numbering about 26, a chain of three names with some words about 28; the rest is room for the model's
# phrasing ("The pass code for the amber door is ...").
NEW_TOKENS = {"single_needle": 64, "multi_key": 64, "question_first": 64, "multi_value": 96, "variable_tracking": 96,
              docqa.KIND: docqa.NEW_TOKENS}


@dataclass(frozen=True)
class Task:
    kind: str
    seed: str
    document: str
    question: str
    answers: tuple[str, ...]
    distractors: tuple[str, ...] = field(default=())
    depth: float | None = None  # where the (first) needle sits: 0 = start, 1 = end
    answer_kind: str = "code"  # what the answer names: "code" (5 digits) or "name" (from ``vocabulary``)
    vocabulary: tuple[str, ...] = field(default=())
    codes: tuple[str, ...] = field(default=())  # every code written into the document

    @property
    def answer(self) -> str:
        return ", ".join(self.answers)

    def extracted(self, generated: str) -> list[str]:
        """What the answer names, sorted (codes or names, per :mod:`.scoring`)."""
        return sorted(extract(generated, self.answer_kind, self.vocabulary))

    def is_correct(self, generated: str) -> bool:
        return is_correct(generated, self.answers, self.distractors, self.answer_kind, self.vocabulary)


@dataclass(frozen=True)
class PromptShape:
    """How a task's document becomes a prompt: the model's tokenizer, the template, the longest prompt allowed."""

    tokenizer: object
    template: Template
    max_prompt_tokens: int

    def prompt_tokens(self, document: str, question: str) -> int:
        """Tokens of the final prompt (template, chat formatting and question included) around ``document``."""
        page = Document(source="task", kind="text", pages=(Page(1, document),))
        return build_prompt(self.tokenizer, page, question, self.template).length

    def tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def task_seed(split: str, kind: str, length: int, sample: int, seed: int = 0) -> str:
    """The seed of one sample: its own for every split, task, length and sample index."""
    return f"{split}/{kind}/{length}/{sample}/{seed}"


def _codes(rng: random.Random, count: int, split: str) -> list[str]:
    """``count`` distinct 5-digit codes of ``split``'s set (multiples of 4 for tune, the others for test)."""
    codes: list[str] = []
    while len(codes) < count:
        value = rng.randint(10_000, 99_999)
        if (value % 4 == 0) == (split == "tune") and str(value) not in codes:
            codes.append(str(value))
    return codes


def _insert(paragraphs: list[str], sentences: list[str], depths: list[float]) -> list[str]:
    """Insert each sentence at its depth (fraction of the paragraphs), keeping their order: by depth, equal depths in
    the order given (a variable chain reads in order).

    The deepest goes in first; each next one goes at its own depth but never after the one placed before it (two
    close depths could otherwise round the shallower one past the deeper one).
    """
    placed = sorted(zip(depths, range(len(sentences)), sentences), reverse=True)
    paragraphs = list(paragraphs)
    limit = len(paragraphs)
    for depth, _, sentence in placed:
        limit = min(round(depth * len(paragraphs)), limit)
        paragraphs.insert(limit, sentence)
    return paragraphs


def _document(shape: PromptShape, rng: random.Random, split: str, sentences: list[str], depths: list[float],
              question: str, head: str | None = None) -> str:
    """Prose from ``split``'s pool with ``sentences`` inserted at ``depths``, as long as the prompt allows.

    The paragraphs are drawn in ``rng``'s order; one that does not fit what is left is skipped and a shorter one may
    follow; the first sentences of a skipped one fill what remains. The prompt is then measured exactly and the last
    paragraph dropped until it fits.
    """
    def assemble(paragraphs: list[str]) -> str:
        return "\n\n".join(([head] if head else []) + _insert(paragraphs, sentences, depths))

    room = shape.max_prompt_tokens - shape.prompt_tokens(assemble([]), question)
    chosen: list[str] = []
    left: list[str] = []  # paragraphs drawn but too long for what was left
    used = 0
    for paragraph in shuffled_paragraphs(split, rng):
        count = shape.tokens(paragraph + "\n\n")
        if used + count <= room:
            chosen.append(paragraph)
            used += count
        else:
            left.append(paragraph)
        if room - used < 24:
            break
    for paragraph in left:  # fill the rest with the first sentences of paragraphs that did not fit
        if room - used < 24:
            break
        sentences_of = re.split(r"(?<=\.) ", paragraph)
        for end in range(len(sentences_of) - 1, 0, -1):
            head_text = " ".join(sentences_of[:end])
            count = shape.tokens(head_text + "\n\n")
            if used + count <= room:
                chosen.append(head_text)
                used += count
                break
    if room - used > max(64, room // 20):
        raise UserError(f"the {split} prose holds {used:,} tokens, not enough for a "
                        f"{shape.max_prompt_tokens:,}-token prompt: ask for shorter prompts")
    document = assemble(chosen)
    while chosen and shape.prompt_tokens(document, question) > shape.max_prompt_tokens:
        chosen.pop()
        document = assemble(chosen)
    if shape.prompt_tokens(document, question) > shape.max_prompt_tokens:
        raise UserError(f"the template, question and needles alone exceed {shape.max_prompt_tokens:,} tokens")
    return document


def single_needle(shape: PromptShape, depth: float, rng: random.Random, seed: str, split: str) -> Task:
    """One 5-digit pass code at ``depth`` in prose."""
    (answer,) = _codes(rng, 1, split)
    question = "What is the secret pass code? Answer with the number."
    document = _document(shape, rng, split, [f"The secret pass code is {answer}."], [depth], question)
    return Task("single_needle", seed, document, question, (answer,), depth=depth, codes=(answer,))


def question_first(shape: PromptShape, depth: float, rng: random.Random, seed: str, split: str) -> Task:
    """A single needle, but the question comes before the document and the prompt ends with a generic request.

    The observation window then holds no trace of the question: SnapKV's known weak spot.
    """
    (answer,) = _codes(rng, 1, split)
    question = "Answer the question asked at the start of the document."
    document = _document(shape, rng, split, [f"The secret pass code is {answer}."], [depth], question,
                         head="Question: What is the secret pass code? Answer with the number.")
    return Task("question_first", seed, document, question, (answer,), depth=depth, codes=(answer,))


def multi_key(shape: PromptShape, depth: float, rng: random.Random, seed: str, split: str, keys: int = 4) -> Task:
    """Several pass codes for differently coloured doors; the question asks for one of them."""
    colours = rng.sample(_KEYS, keys)
    codes = _codes(rng, keys, split)
    depths = [depth] + [rng.random() for _ in range(keys - 1)]
    sentences = [f"The pass code for the {colour} door is {code}." for colour, code in zip(colours, codes)]
    question = f"What is the pass code for the {colours[0]} door? Answer with the number."
    document = _document(shape, rng, split, sentences, depths, question)
    return Task("multi_key", seed, document, question, (codes[0],), distractors=tuple(codes[1:]), depth=depth,
                codes=tuple(codes))


def multi_value(shape: PromptShape, depth: float, rng: random.Random, seed: str, split: str, values: int = 3) -> Task:
    """One key with several values spread through the document; all must be recalled, and nothing else."""
    colour = rng.choice(_KEYS)
    codes = _codes(rng, values, split)
    depths = sorted([depth] + [rng.random() for _ in range(values - 1)])
    sentences = [f"One of the pass codes for the {colour} door is {code}." for code in codes]
    question = f"What are all the pass codes for the {colour} door? Answer with the numbers."
    document = _document(shape, rng, split, sentences, depths, question)
    return Task("multi_value", seed, document, question, tuple(codes), depth=depth, codes=tuple(codes))


def variable_tracking(shape: PromptShape, depth: float, rng: random.Random, seed: str, split: str,
                      hops: int = 2) -> Task:
    """A value passed along a chain of variables (RULER-style); exactly the chain's variables must be named."""
    names = rng.sample(VARIABLES, hops + 2)
    value, decoy = _codes(rng, 2, split)
    chain = [f"VAR {names[0]} = {value}."] + [f"VAR {names[i + 1]} = VAR {names[i]}." for i in range(hops)]
    sentences = chain + [f"VAR {names[-1]} = {decoy}."]
    depths = sorted([depth] + [rng.random() for _ in range(len(sentences) - 1)])  # the chain stays in order
    question = (f"Which variables are assigned the value {value}, directly or through another variable? "
                "Answer with their names.")
    document = _document(shape, rng, split, sentences, depths, question)
    return Task("variable_tracking", seed, document, question, tuple(names[: hops + 1]), distractors=(names[-1],),
                depth=depth, answer_kind="name", vocabulary=VARIABLES, codes=(value, decoy))


TASKS: dict[str, Callable[..., Task]] = {
    "single_needle": single_needle,
    "multi_key": multi_key,
    "multi_value": multi_value,
    "variable_tracking": variable_tracking,
    "question_first": question_first,
}
# every task kind: the generated ones, then the questions about real documents (:mod:`.docqa`)
TASK_KINDS = (*TASKS, docqa.KIND)


def docqa_tasks(shape: PromptShape, length: int, samples: int, split: str, seed: int) -> list[Task]:
    """The drawn questions about the documents of ``length`` (none at a length without documents)."""
    tasks = []
    for i, question in enumerate(docqa.draw(length, samples, split, seed)):
        text = docqa.document(question.source)
        if shape.prompt_tokens(text, question.question) > shape.max_prompt_tokens:
            raise UserError(f"{docqa.SOURCES[question.source].title} does not fit a {shape.max_prompt_tokens:,}-token "
                            "prompt")
        tasks.append(Task(docqa.KIND, task_seed(split, docqa.KIND, length, i, seed), text, question.question,
                          question.expected, depth=docqa.depth(question), answer_kind=question.kind,
                          vocabulary=question.vocabulary))
    return tasks


def make_tasks(tokenizer, kind: str, length: int, samples: int, template: Template, *,
               max_prompt_tokens: int | None = None, split: str = "test", seed: int = 0) -> list[Task]:
    """``samples`` tasks of ``kind`` whose prompts hold at most ``max_prompt_tokens`` (default ``length``) tokens.

    Needle depths spread evenly from 5% to 95% over the samples; sample ``i`` is seeded by
    :func:`task_seed` ``(split, kind, length, i, seed)``. ``docqa`` draws its questions instead (:func:`.docqa.draw`).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    shape = PromptShape(tokenizer, template, min(length, max_prompt_tokens or length))
    if kind == docqa.KIND:
        return docqa_tasks(shape, length, samples, split, seed)
    depths = [0.05 + 0.9 * i / max(1, samples - 1) for i in range(samples)]
    tasks = []
    for i, depth in enumerate(depths):
        seed_text = task_seed(split, kind, length, i, seed)
        tasks.append(TASKS[kind](shape, depth, random.Random(seed_text), seed_text, split))
    return tasks
