"""A batch's running totals, counted from the lines it writes (so a Ray run and a local run count alike)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class BatchSummary:
    """What a batch has done so far.

    documents/questions: what this run has to do (after skipping what the output already answers);
    skipped_documents/skipped_questions: what the output already answered; documents_done: documents whose every
    question has a line (answer or error); answered/failed: answer and error lines written; worker_failures:
    workers that died mid-run (their questions were given to another); tokens: prompt tokens prefilled for the
    answers plus tokens generated; answer_seconds: the answers' own prefix, prefill and decode times (no model
    load, no reading); kv_bytes_before/after: the answers' KV cache before and after compression.
    """

    documents: int = 0
    questions: int = 0
    skipped_documents: int = 0
    skipped_questions: int = 0
    workers: int = 1
    documents_done: int = 0
    answered: int = 0
    failed: int = 0
    worker_failures: int = 0
    tokens: int = 0
    answer_seconds: float = 0.0
    kv_bytes_before: int = 0
    kv_bytes_after: int = 0
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None

    def record(self, line: dict) -> None:
        """Count one written line."""
        if "error" in line:
            self.failed += 1
            return
        self.answered += 1
        self.tokens += line["prompt_tokens"] - line["reused_prefix_tokens"] + line["generated_tokens"]
        timings = line["timings"]
        self.answer_seconds += timings["prefix_s"] + timings["prefill_s"] + timings["decode_s"]
        self.kv_bytes_before += line["cache"]["bytes_before"]
        self.kv_bytes_after += line["cache"]["bytes_after"]

    @property
    def done(self) -> int:
        """Questions with a line (answered or failed)."""
        return self.answered + self.failed

    @property
    def seconds(self) -> float:
        return (self.finished or time.perf_counter()) - self.started

    @property
    def seconds_per_question(self) -> float | None:
        return self.seconds / self.answered if self.answered else None

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def kv_bytes_saved(self) -> int:
        return self.kv_bytes_before - self.kv_bytes_after

    def to_json(self) -> dict:
        return {"documents": self.documents, "questions": self.questions, "skipped_documents": self.skipped_documents,
                "skipped_questions": self.skipped_questions, "workers": self.workers,
                "documents_done": self.documents_done, "answered": self.answered, "failed": self.failed,
                "worker_failures": self.worker_failures, "tokens": self.tokens, "seconds": round(self.seconds, 3),
                "answer_seconds": round(self.answer_seconds, 3),
                "kv_bytes_before": self.kv_bytes_before, "kv_bytes_after": self.kv_bytes_after}
