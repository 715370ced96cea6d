"""``snapkv bench niah``: the public Needle In A Haystack, context lengths x depths x methods x budgets.

Each (length, depth) cell is one :class:`~snapkv_cli.answering.session.DocumentSession`, as in ``bench accuracy``: its
document prefix is prefilled once and every method and budget asks the question on a fork of it
(``session.ask(question, settings=...)``). Answers are scored without an LLM judge (the package's judge is GPT-4
rating 1-10):

- **exact**: the answer contains both "sandwich" and "dolores park" (case-insensitive), the two facts of the needle
  that the question does not give away;
- **partial**: the share of the needle's content words that the question does not contain (eat, sandwich, sit,
  dolores, park, sunny, day) found as words in the answer, from 0 to 1.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..answering.documents import Document, Page
from ..answering.prompting import Template
from ..answering.session import DocumentSession
from ..generation import GenerationOptions
from ..generation.options import generation_default
from ..models.loader import LoadedModel
from .grid import BENCH_NEW_TOKENS, MethodGrid
from .needle import NEEDLE, RETRIEVAL_QUESTION, Haystack, haystack_text, needle_context

DEFAULT_NIAH_LENGTHS = (1024, 2048, 4096, 8192)
DEFAULT_NIAH_DEPTHS = (0.0, 25.0, 50.0, 75.0, 100.0)
DEFAULT_NIAH_BUDGETS = (256, 1024)

# The package's prompt (its OpenAI provider): this system message, the context, then the question with this
# instruction. The package sends context and question as two user messages; here they are one, context first.
SYSTEM_PROMPT = "You are a helpful AI bot that answers questions for a user. Keep your response short and direct"
QUESTION_SUFFIX = " Don't give information outside the document or repeat your findings"
NIAH_TEMPLATE = Template(name="niah", system=SYSTEM_PROMPT, user="{document}\n\n{question}")
NIAH_QUESTION = RETRIEVAL_QUESTION + QUESTION_SUFFIX

REQUIRED_PHRASES = ("sandwich", "dolores park")
_STOP_WORDS = {"a", "an", "and", "on", "the", "to", "in", "is", "of"}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


PARTIAL_WORDS = tuple(dict.fromkeys(word for word in _words(NEEDLE)
                                    if word not in set(_words(RETRIEVAL_QUESTION)) | _STOP_WORDS))


def score_answer(answer: str) -> tuple[bool, float]:
    """(exact, partial) for an answer to the default needle; see the module's docstring."""
    lowered = " ".join(_words(answer))
    exact = all(phrase in lowered for phrase in REQUIRED_PHRASES)
    present = set(_words(answer))
    return exact, sum(word in present for word in PARTIAL_WORDS) / len(PARTIAL_WORDS)


@dataclass
class NiahPlan(MethodGrid):
    budgets: tuple[int, ...] = DEFAULT_NIAH_BUDGETS
    lengths: tuple[int, ...] = DEFAULT_NIAH_LENGTHS
    depths: tuple[float, ...] = DEFAULT_NIAH_DEPTHS
    max_new_tokens: int = BENCH_NEW_TOKENS["niah"]


@dataclass
class NiahOutcome:
    length: int  # the package's context length (the document is 200 tokens shorter)
    depth: float  # percent
    prompt_tokens: int
    needle_at: float  # share of the haystack's tokens before the needle: the depth after the sentence move
    method: str
    budget: int | None
    exact: bool
    partial: float
    answer: str
    prefix_s: float  # the cell's shared document prefill (the same for every method of the cell)
    seconds: float  # this method's question prefill, selection and decoding


def run_niah(loaded: LoadedModel, plan: NiahPlan, haystack: Haystack, *, prefill_chunk: int | None = None,
             decode_weights: str = generation_default("decode_weights"),
             on_outcome: Callable[[NiahOutcome], None] | None = None) -> list[NiahOutcome]:
    """Every cell of ``plan``; ``prefill_chunk`` (None: the model's own default) bounds the prefill's memory;
    ``decode_weights``: the decoding steps' weights (``--decode-weights``)."""
    tokenizer = loaded.tokenizer
    generation = GenerationOptions(max_new_tokens=plan.max_new_tokens, prefill_chunk=prefill_chunk,
                                   decode_weights=decode_weights)
    attention_sums = plan.needs_attention_sums()
    text = haystack_text(tokenizer, haystack, max(plan.lengths))
    outcomes: list[NiahOutcome] = []
    for length in plan.lengths:
        for depth in plan.depths:
            context = needle_context(tokenizer, text, length, depth)
            document = Document(source=f"niah-{length}-{depth:g}", kind="text", pages=(Page(1, context.text),))
            session = DocumentSession(loaded, document, plan.settings("full", None), NIAH_TEMPLATE,
                                      generation=generation, attention_sums=attention_sums)
            needle_at = round(context.needle_start / max(1, len(context.token_ids) - context.needle_tokens), 4)
            for method, budget in plan.cells():
                started = time.perf_counter()
                answer = session.ask(NIAH_QUESTION, settings=plan.settings(method, budget))
                seconds = time.perf_counter() - started - answer.report.prefix.seconds  # the prefix: prefix_s
                exact, partial = score_answer(answer.result.answer)
                outcome = NiahOutcome(length, depth, answer.prompt.length, needle_at, method, budget, exact,
                                      round(partial, 4), answer.result.answer, round(session.prefix.seconds, 3),
                                      round(seconds, 3))
                outcomes.append(outcome)
                if on_outcome is not None:
                    on_outcome(outcome)
            del session  # its prefix (the document's full KV) goes before the next cell's
    return outcomes


@dataclass
class NiahCell:
    """Scores of one method and budget, over the depths of one length (``length`` 0: over every length)."""

    method: str
    budget: int | None
    length: int
    exact: int = 0
    partial_sum: float = 0.0
    total: int = 0

    @property
    def exact_rate(self) -> float:
        return self.exact / self.total if self.total else 0.0

    @property
    def partial(self) -> float:
        return self.partial_sum / self.total if self.total else 0.0


def summarize_niah(outcomes: list[NiahOutcome], *, pooled: bool = False) -> list[NiahCell]:
    """Per (method, budget, length), or per (method, budget) over every length when ``pooled``."""
    cells: dict[tuple, NiahCell] = {}
    for o in outcomes:
        length = 0 if pooled else o.length
        cell = cells.setdefault((o.method, o.budget, length), NiahCell(o.method, o.budget, length))
        cell.exact += o.exact
        cell.partial_sum += o.partial
        cell.total += 1
    return list(cells.values())


def best_other(outcomes: list[NiahOutcome], shown: tuple[str, ...] = ("full", "snapkv")) -> NiahCell | None:
    """The method and budget, among those not in ``shown``, with the most exact answers over the grid (then the
    highest partial score, then the smaller budget); None when every method is shown."""
    others = [cell for cell in summarize_niah(outcomes, pooled=True) if cell.method not in shown]
    return max(others, key=lambda cell: (cell.exact, cell.partial_sum, -(cell.budget or 0)), default=None)


def summary_rows(outcomes: list[NiahOutcome], *, pooled: bool = False) -> list[dict]:
    """The JSON's ``cells`` (per length) or ``overall`` (``pooled``) rows, recomputed from the outcomes."""
    return [{"method": cell.method, "budget": cell.budget, "length": cell.length or None, "total": cell.total,
             "exact": round(cell.exact_rate, 4), "partial": round(cell.partial, 4)}
            for cell in summarize_niah(outcomes, pooled=pooled)]


def outcomes_from_json(report: dict) -> list[NiahOutcome]:
    return [NiahOutcome(**row) for row in report["outcomes"]]


def to_json(plan: NiahPlan, outcomes: list[NiahOutcome], provenance: dict, haystack: Haystack) -> dict:
    return {"schema_version": 2, "kind": "niah", "plan": asdict(plan), "provenance": provenance,
            "haystack": {"source": haystack.source, "essays": len(haystack.essays), "needle": NEEDLE,
                         "question": NIAH_QUESTION, "required_phrases": list(REQUIRED_PHRASES),
                         "partial_words": list(PARTIAL_WORDS)},
            "cells": summary_rows(outcomes), "overall": summary_rows(outcomes, pooled=True),
            "outcomes": [asdict(o) for o in outcomes]}
