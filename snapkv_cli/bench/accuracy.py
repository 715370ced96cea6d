"""``snapkv bench accuracy``: methods x budgets x prompt lengths on synthetic tasks, retention vs the full cache.

Each sample is one :class:`~snapkv_cli.answering.session.DocumentSession` (the path every command takes): its
document prefix is prefilled once, with the attention sums kept when a method needs them, and every method and
budget asks the question on a fork of it (``session.ask(question, settings=...)``; the selection still sees every
key), so a cell costs a short question prefill and the decoded tokens, not a whole prefill. A prompt is never longer
than the model's context minus the tokens its answer may take, and a (method, budget) whose budget holds the whole
prompt is not run (it would be the full cache under another name): the JSON lists it under ``skipped``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..answering.documents import Document, Page
from ..answering.prompting import Template
from ..answering.session import DocumentSession, context_length
from ..errors import PromptTooLong
from ..generation import GenerationOptions
from ..generation.options import generation_default
from ..models.loader import LoadedModel
from .grid import MethodGrid
from .retention import Paired, Tally
from .tasks import NEW_TOKENS, TASKS, Task, make_tasks

DEFAULT_LENGTHS = (1024, 2048, 4096, 8192)


@dataclass
class AccuracyPlan(MethodGrid):
    """The grid of methods x budgets (:class:`MethodGrid`) over tasks, lengths and samples."""

    max_new_tokens: int | None = None  # None: each task's own (tasks.NEW_TOKENS)
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    tasks: tuple[str, ...] = tuple(TASKS)
    samples: int = 5
    split: str = "test"
    prefill_chunk: int | None = None  # prefill in chunks of this many tokens (memory only: the selection is exact)
    decode_weights: str = generation_default("decode_weights")  # the decoding steps' weights (--decode-weights)

    def new_tokens(self, kind: str) -> int:
        return self.max_new_tokens or NEW_TOKENS[kind]

    def prompt_limit(self, context: int, kind: str) -> int:
        """The most prompt tokens a task of ``kind`` may take: the context less its answer's room."""
        return context - self.new_tokens(kind)


@dataclass
class Outcome:
    task: str
    length: int  # the nominal length; the prompt has ``prompt_tokens`` <= min(length, context - max_new_tokens)
    sample: int
    seed: str
    depth: float | None
    prompt_tokens: int
    max_new_tokens: int
    method: str
    budget: int | None
    correct: bool
    answer: str
    expected: list[str]
    extracted: list[str]  # what the scorer read in the answer
    generated_tokens: int


@dataclass
class Skipped:
    """A (sample, method, budget) not run: the budget holds the whole prompt, so nothing would be compressed."""

    task: str
    length: int
    sample: int
    prompt_tokens: int
    method: str
    budget: int


def plan_tasks(loaded: LoadedModel, plan: AccuracyPlan, kind: str, length: int, template: Template) -> list[Task]:
    """The plan's samples of one task kind and length, each prompt within the context less its answer's tokens."""
    return make_tasks(loaded.tokenizer, kind, length, plan.samples, template,
                      max_prompt_tokens=plan.prompt_limit(context_length(loaded), kind), split=plan.split,
                      seed=plan.seed)


def run_accuracy(loaded: LoadedModel, plan: AccuracyPlan, template: Template,
                 on_outcome: Callable[[Outcome], None] | None = None) -> tuple[list[Outcome], list[Skipped]]:
    context = context_length(loaded)
    attention_sums = plan.needs_attention_sums()
    outcomes: list[Outcome] = []
    skipped: list[Skipped] = []
    for length in plan.lengths:
        for kind in plan.tasks:
            new_tokens = plan.new_tokens(kind)
            limit = plan.prompt_limit(context, kind)
            session, prefilled = None, None
            for sample, task in enumerate(plan_tasks(loaded, plan, kind, length, template)):
                if task.document != prefilled:  # questions about one document (docqa) share its prefix
                    session = None  # the last document's prefix goes before the next one's
                    document = Document(source=task.seed, kind="text", pages=(Page(1, task.document),))
                    session = DocumentSession(loaded, document, plan.settings("full", None), template,
                                              generation=GenerationOptions(max_new_tokens=new_tokens,
                                                                           prefill_chunk=plan.prefill_chunk,
                                                                           decode_weights=plan.decode_weights),
                                              attention_sums=attention_sums)
                    prefilled = task.document
                try:
                    # the task builder keeps the prompt within ``limit``; a broken guarantee must not pass
                    prompt = session.build_prompt(task.question)
                except PromptTooLong as error:
                    raise PromptTooLong(error.tokens, limit, context=context, model=loaded.name) from None
                for method, budget in plan.cells():
                    if budget is not None and budget >= prompt.length:
                        skipped.append(Skipped(kind, length, sample, prompt.length, method, budget))
                        continue
                    answer = session.ask(task.question, settings=plan.settings(method, budget))
                    result = answer.result
                    outcome = Outcome(kind, length, sample, task.seed, task.depth, answer.prompt.length, new_tokens,
                                      method, budget, task.is_correct(result.answer), result.answer,
                                      list(task.answers), task.extracted(result.answer), len(result.generated_ids))
                    outcomes.append(outcome)
                    if on_outcome is not None:
                        on_outcome(outcome)
            del session
    return outcomes, skipped


def tally(outcomes: list[Outcome], *, pool_tasks: bool = False) -> dict[tuple, Tally]:
    """Counts per (task, length, method, budget), each sample paired with the full cache's outcome on it.

    ``pool_tasks`` pools the tasks at each length (key task ``"all"``); lengths are never pooled. Samples without a
    full-cache outcome are left out (retention needs the pair).
    """
    full = {o.seed: o.correct for o in outcomes if o.method == "full"}  # a task's seed names its sample uniquely
    tallies: dict[tuple, Tally] = {}
    for o in outcomes:
        pair = full.get(o.seed)
        if pair is None:
            continue
        key = ("all" if pool_tasks else o.task, o.length, o.method, o.budget)
        tallies.setdefault(key, Tally()).add(Paired(o.correct, pair))
    return tallies


def summary_rows(outcomes: list[Outcome], *, pool_tasks: bool = False) -> list[dict]:
    rows = []
    for (task, length, method, budget), counts in tally(outcomes, pool_tasks=pool_tasks).items():
        rows.append({"task": task, "length": length, "method": method, "budget": budget, **counts.as_dict()})
    return rows


def outcomes_from_json(report: dict) -> list[Outcome]:
    return [Outcome(**row) for row in report["outcomes"]]


def merge_reports(reports: list[dict]) -> dict:
    """Several accuracy reports run with the same settings (one per length, or more samples under another ``seed``)
    as one: outcomes and skipped cells concatenated, the plan's lengths and tasks united. Samples stay paired by
    their task seed, which differs between base seeds. Raises ``ValueError`` if the settings differ."""
    if len(reports) == 1:
        return reports[0]
    same = ("window_size", "kernel_size", "pooling", "gqa_aggregation", "max_new_tokens", "split")
    first = reports[0]["plan"]
    for report in reports[1:]:
        differing = [key for key in same if report["plan"][key] != first[key]]
        if differing:
            raise ValueError(f"the reports differ in {', '.join(differing)}")
    plan = {**first, "lengths": sorted({length for r in reports for length in r["plan"]["lengths"]}),
            "tasks": list(dict.fromkeys(task for r in reports for task in r["plan"]["tasks"]))}
    return {"schema_version": 2, "kind": "accuracy", "plan": plan,
            "provenance": [r["provenance"] for r in reports],
            "outcomes": [o for r in reports for o in r["outcomes"]],
            "skipped": [s for r in reports for s in r.get("skipped", [])]}


def to_json(plan: AccuracyPlan, outcomes: list[Outcome], skipped: list[Skipped], provenance: dict) -> dict:
    return {"schema_version": 2, "kind": "accuracy", "plan": asdict(plan), "provenance": provenance,
            "cells": summary_rows(outcomes), "by_length": summary_rows(outcomes, pool_tasks=True),
            "outcomes": [asdict(o) for o in outcomes], "skipped": [asdict(s) for s in skipped]}
