"""A batch in this process: one model, loaded once, the documents one after the other."""

from __future__ import annotations

from collections.abc import Callable

from ..answering.runner import RunOptions
from .driver import Executor, Recorder, Task, read_document
from .lines import describe_error
from .worker import BatchWorker


class LocalExecutor(Executor):
    """Runs every task on one :class:`~.worker.BatchWorker` here; each answer is recorded as soon as it is ready.

    A model that cannot be loaded stops the batch (a :class:`~snapkv_cli.errors.UserError`); a document or
    question that fails gets its error lines and the batch goes on.
    """

    def __init__(self, options: RunOptions, *, describe: Callable[[BaseException], str] = describe_error,
                 load_model: Callable | None = None):
        self.options, self.describe, self.load_model = options, describe, load_model

    def run(self, tasks: list[Task], recorder: Recorder) -> None:
        worker = BatchWorker(self.options, describe=self.describe, presenter=recorder.presenter,
                             load_model=self.load_model)
        worker.runner.loaded  # noqa: B018  (loads the model: an error here stops the batch)
        for task in tasks:
            document = read_document(task, self.options, recorder, self.describe)
            if document is None:
                continue
            worker.open(task.job, document, len(task.questions))
            for index, question in task.questions:
                recorder.status(f"{task.job.document}: question {index + 1} of {len(task.job.questions)}...")
                recorder.line(worker.answer(index, question))
