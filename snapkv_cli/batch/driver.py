"""A batch from start to end: skip what the output already answers, hand the rest to an executor, write every line
once, in one place, and count it.

The driver (this process) owns the output; an executor (:mod:`.local`, or :mod:`.ray_executor` on a Ray cluster)
only computes lines and hands each one to the :class:`Recorder`, which writes it, counts it and tells the
presenter. Documents are read here, on the driver, so a cluster's workers need no access to the files.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..answering.documents import Document
from ..answering.runner import RunOptions
from .jobs import Job
from .lines import describe_error, error_line
from .output import line_key
from .presenter import BatchPresenter
from .summary import BatchSummary


@dataclass(frozen=True)
class Task:
    """The questions of ``job`` still to answer, as ``(index in the job, question)``; ``attempt`` counts the
    workers that have been given them (a worker that dies hands them to the next)."""

    job: Job
    questions: tuple[tuple[int, str], ...]
    attempt: int = 1


def plan(jobs: Sequence[Job], answered: set[tuple]) -> tuple[list[Task], int, int]:
    """The tasks left once ``answered`` ``(id, question)`` pairs are skipped, and how many documents and questions
    that skips."""
    tasks, skipped_documents, skipped_questions = [], 0, 0
    for job in jobs:
        left = tuple((index, question) for index, question in enumerate(job.questions)
                     if (job.id, question) not in answered)
        skipped_questions += len(job.questions) - len(left)
        if left:
            tasks.append(Task(job, left))
        else:
            skipped_documents += 1
    return tasks, skipped_documents, skipped_questions


class Recorder:
    """Takes every line an executor produces: writes it to ``output``, counts it in ``summary`` (a document is done
    when each of its questions has a line), tells ``presenter``."""

    def __init__(self, output, summary: BatchSummary, presenter: BatchPresenter, tasks: Sequence[Task]):
        self.output, self.summary, self.presenter = output, summary, presenter
        self.left = Counter({task.job.id: len(task.questions) for task in tasks})
        self.written: set[tuple] = set()

    def line(self, line: dict) -> None:
        key = line_key(line)
        if key in self.written:  # an executor must never give a question two lines; refuse rather than duplicate
            raise RuntimeError(f"a second line for {key}")
        self.written.add(key)
        self.output.write(line)
        self.summary.record(line)
        self.left[line["id"]] -= 1
        if self.left[line["id"]] == 0:
            self.summary.documents_done += 1
        self.presenter.recorded(line, self.summary)

    def fail(self, task: Task, message: str) -> None:
        """An error line for each question of ``task``."""
        for index, question in task.questions:
            self.line(error_line(task.job, index, question, message))

    def worker_failed(self, message: str) -> None:
        self.summary.worker_failures += 1
        self.presenter.worker_failed(message, self.summary)

    def status(self, message: str) -> None:
        self.presenter.progress(message)


def read_document(task: Task, options: RunOptions, recorder: Recorder,
                  describe: Callable[[BaseException], str] = describe_error) -> Document | None:
    """``task``'s document, read with the job's pages (else the run's) and the run's size limit; None when it cannot
    be read (an error line for each of its questions is written then, and the batch goes on)."""
    recorder.status(f"Reading {task.job.document}...")
    try:
        return options.reader.read(task.job.document, pages=task.job.pages)
    except Exception as error:
        recorder.fail(task, describe(error))
        return None


class Executor:
    """Computes the lines of a batch's tasks somewhere and hands each to the recorder as soon as it is ready."""

    workers = 1

    def run(self, tasks: list[Task], recorder: Recorder) -> None:
        raise NotImplementedError


def run_batch(jobs: Sequence[Job], executor: Executor, output, presenter: BatchPresenter | None = None) -> BatchSummary:
    """Run ``jobs`` on ``executor``, writing to ``output`` (an :class:`~.output.AnswerFile` skips what it already
    answers); returns the summary (``failed`` > 0 when any question got an error line)."""
    presenter = presenter or BatchPresenter()
    tasks, skipped_documents, skipped_questions = plan(jobs, output.answered)
    summary = BatchSummary(documents=len(tasks), questions=sum(len(task.questions) for task in tasks),
                           skipped_documents=skipped_documents, skipped_questions=skipped_questions,
                           workers=executor.workers)
    recorder = Recorder(output, summary, presenter, tasks)
    presenter.started(summary)
    try:
        if tasks:
            executor.run(tasks, recorder)
    finally:
        summary.finished = time.perf_counter()
        presenter.finished(summary)
        presenter.close()
    return summary
