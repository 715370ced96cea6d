"""The part of a batch that runs where the model is: in this process, or as a Ray actor on its own device.

A :class:`BatchWorker` holds one :class:`~snapkv_cli.answering.runner.Runner` (one loaded model). The driver gives it a
document at a time (:meth:`BatchWorker.open`) and then that document's questions one by one
(:meth:`BatchWorker.answer`): the document is prefilled once for all of them and every question gets its own SnapKV
selection, exactly as ``snapkv ask`` with those questions answers them. A question that fails becomes an error
line; the worker goes on with the next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..answering.documents import Document
from ..answering.presenter import Presenter
from ..answering.runner import Runner, RunOptions
from .jobs import Job
from .lines import answer_line, describe_error, error_line


class BatchWorker:
    """Answers a batch's questions with one model, loaded once (see the module's docstring).

    describe: turns an error into the message of its error line; presenter: told what the runner does (progress);
    load_model: replaces :func:`snapkv_cli.models.loader.load_model` (tests).
    """

    def __init__(self, options: RunOptions, *, describe: Callable[[BaseException], str] = describe_error,
                 presenter: Presenter | None = None, load_model: Callable | None = None):
        self.runner = Runner(options, presenter, load_model=load_model)
        self.describe = describe
        self.answers = 0
        self._job: Job | None = None
        self._runner: Runner | None = None
        self._session = None
        self._open_error: str | None = None

    def load(self) -> str | None:
        """Load the model now: None when it loaded, else the error's message."""
        try:
            self.runner.loaded  # noqa: B018  (the property loads it)
        except Exception as error:
            return self.describe(error)
        return None

    def open(self, job: Job, document: Document, questions: int) -> None:
        """Start on ``job``'s ``document``, read by the driver (with the job's pages, so the pages need not reach the
        runner here), which will be asked ``questions`` questions next (one question keeps nothing for later, as
        ``ask`` does); the job's own template and truncation apply."""
        options = self.runner.options
        options = replace(options, truncate=job.truncate or options.truncate, template=job.template or options.template)
        self._job, self._session, self._open_error = job, None, None  # the last document's prefix is freed here
        try:
            self._runner = self.runner.with_options(options)
            self._session = self._runner.open(document, questions=questions)
        except Exception as error:
            self._open_error = self.describe(error)

    def answer(self, index: int, question: str) -> dict:
        """The line of question ``index`` (its place in the job) of the open document: its answer, or its error.

        The answer's report says ``question_index`` = ``index`` and counts the model's load time only in this
        worker's first answer (``timings.load_s`` is 0 after it, as it is after a run's first answer in ``ask``).
        """
        job = self._job
        if job is None:
            raise RuntimeError("open a document before asking its questions")
        if self._open_error is not None:
            return error_line(job, index, question, self._open_error)
        try:
            answer = self._runner.answer(self._session, question, index=index)
        except Exception as error:
            return error_line(job, index, question, self.describe(error))
        report = answer.report
        load_s = report.timings.load_s if self.answers == 0 else 0.0
        report = replace(report, question_index=index, timings=replace(report.timings, load_s=load_s))
        self.answers += 1
        return answer_line(job, report)
