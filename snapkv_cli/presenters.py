"""What a run tells whoever shows it: progress, notices, prompts, the streamed answer, finished answers, errors.

:class:`~snapkv_cli.runner.Runner` calls a :class:`Presenter`; this base does nothing (a library caller that wants
nothing shown); a batch tells a :class:`BatchPresenter` (a :class:`Presenter` that also hears of the batch's plan, each
line written and workers lost). The command line's presenters (terminal, JSON lines, chat, the batch's progress bar
and summary) are in :mod:`snapkv_cli.cli.presenters`.

Progress comes in steps: :meth:`Presenter.progress` starts one of unknown length (fetching a model, converting it,
loading it), :meth:`Presenter.phase` one of a known number of units that :meth:`Presenter.advance` counts off (the
prefill's layers, chunk after chunk; the answer's tokens). A step lasts until the next one starts or the run ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the presenters are imported before torch is
    from .batch.summary import BatchSummary
    from .pipeline import Answer
    from .prompting import Prompt


class Presenter:
    """Receives the events of a run; every method does nothing here."""

    def progress(self, message: str) -> None:
        """A step of the run of unknown length is starting (fetching or loading a model, saving a cache...)."""

    def phase(self, name: str, total: int | None, unit: str) -> None:
        """A step of ``total`` units of ``unit`` (layer forwards, tokens) is starting, counted off by :meth:`advance`
        (``total`` None: unknown). Here: told as ``progress(name)``, for presenters that show only messages."""
        self.progress(name)

    def advance(self, done: int = 1) -> None:
        """``done`` more units of the current phase are done."""

    def notice(self, message: str) -> None:
        """Something the user must see whatever the output is (a model's terms of use at its first fetch)."""

    def question(self, question: str, index: int, total: int | None) -> None:
        """Question ``index`` (0-based) of ``total`` (None: open-ended, as in chat) is about to be asked."""

    def prompt(self, prompt: Prompt, window_size: int, index: int, total: int | None) -> None:
        """Its prompt is built (before the prefill)."""

    def text(self, chunk: str) -> None:
        """More of the answer, as it is generated."""

    def answered(self, answer: Answer, index: int, total: int | None) -> None:
        """The answer is complete, with its report."""

    def failed(self, message: str, index: int) -> None:
        """Question ``index`` could not be answered: ``message`` says why (only runs that go on after an error,
        such as chat, report this)."""

    def close(self) -> None:
        """The run is over."""


class BatchPresenter(Presenter):
    """Receives a batch's events; every method does nothing here."""

    def started(self, summary: BatchSummary) -> None:
        """The batch is about to start: ``summary`` holds what it has to do and what it skips."""

    def recorded(self, line: dict, summary: BatchSummary) -> None:
        """``line`` (an answer or an error) was written; ``summary`` counts it already."""

    def worker_failed(self, message: str, summary: BatchSummary) -> None:
        """A worker died (``message`` says which and what happens to its questions)."""

    def finished(self, summary: BatchSummary) -> None:
        """The batch is over (or stopped: ``summary.done < summary.questions``)."""
