"""``snapkv bench accuracy``: methods x budgets x prompt lengths on synthetic tasks, retention vs the full cache.

Each sample's document prefix is prefilled once and forked for every method and budget (the selection still sees
every key), so a cell costs a short question prefill and a few decoded tokens, not a whole prefill.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from ..documents import Document, Page
from ..generation import build_prefix, generate_answer
from ..models.loader import LoadedModel
from ..prompting import Template, build_prompt
from .grid import MethodGrid
from .tasks import TASKS, make_tasks

DEFAULT_BUDGETS = (128, 256, 512, 1024, 2048)
DEFAULT_LENGTHS = (1024, 2048, 4096, 8192)


@dataclass
class AccuracyPlan(MethodGrid):
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    tasks: tuple[str, ...] = tuple(TASKS)
    samples: int = 5


@dataclass
class Outcome:
    task: str
    length: int
    sample: int
    depth: float | None
    prompt_tokens: int
    method: str
    budget: int | None
    correct: bool
    answer: str
    expected: str


def run_accuracy(loaded: LoadedModel, plan: AccuracyPlan, template: Template,
                 on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    model, tokenizer = loaded.model, loaded.tokenizer
    outcomes: list[Outcome] = []
    for length in plan.lengths:
        for kind in plan.tasks:
            for sample, task in enumerate(make_tasks(tokenizer, kind, length, plan.samples, plan.seed)):
                document = Document(source=f"{kind}-{length}-{sample}", kind="text", pages=(Page(1, task.document),))
                prompt = build_prompt(tokenizer, document, task.question, template)
                prefix = build_prefix(model, prompt.input_ids[: prompt.prefix_length], plan.window_size,
                                      accumulate_attention=plan.needs_attention_sums())
                for method, budget in plan.cells():
                    result = generate_answer(model, tokenizer, prompt.input_ids, plan.settings(method, budget),
                                             max_new_tokens=plan.max_new_tokens, prefix=prefix,
                                             prefix_length=prompt.prefix_length)
                    outcome = Outcome(kind, length, sample, task.depth, prompt.length, method, budget,
                                      task.is_correct(result.answer), result.answer, task.answer)
                    outcomes.append(outcome)
                    if on_outcome is not None:
                        on_outcome(outcome)
    return outcomes


@dataclass
class Cell:
    task: str
    length: int
    method: str
    budget: int | None
    correct: int = 0
    total: int = 0
    full_correct: int = 0  # the full cache on the same samples

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def retention(self) -> float | None:
        return self.correct / self.full_correct if self.full_correct else None


def summarize(outcomes: list[Outcome]) -> list[Cell]:
    """Accuracy per (task, length, method, budget), with retention against the full cache on the same samples."""
    full = {(o.task, o.length, o.sample): o.correct for o in outcomes if o.method == "full"}
    cells: dict[tuple, Cell] = {}
    for o in outcomes:
        cell = cells.setdefault((o.task, o.length, o.method, o.budget), Cell(o.task, o.length, o.method, o.budget))
        cell.total += 1
        cell.correct += o.correct
        cell.full_correct += full.get((o.task, o.length, o.sample), False)
    return list(cells.values())


def overall(cells: list[Cell]) -> list[Cell]:
    """The cells pooled over tasks and lengths, per (method, budget)."""
    pooled: dict[tuple, Cell] = {}
    for cell in cells:
        total = pooled.setdefault((cell.method, cell.budget), Cell("all", 0, cell.method, cell.budget))
        total.correct += cell.correct
        total.total += cell.total
        total.full_correct += cell.full_correct
    return list(pooled.values())


def to_json(plan: AccuracyPlan, outcomes: list[Outcome], machine: dict) -> dict:
    cells = summarize(outcomes)

    def row(cell: Cell) -> dict:
        retention = None if cell.retention is None else round(cell.retention, 4)
        return {**asdict(cell), "accuracy": round(cell.accuracy, 4), "retention": retention}

    return {"schema_version": 1, "kind": "accuracy", "plan": asdict(plan), "machine": machine,
            "cells": [row(c) for c in cells], "overall": [row(c) for c in overall(cells)],
            "outcomes": [asdict(o) for o in outcomes]}
