"""What a batch tells whoever shows it: the plan, each line written, workers lost, the end.

A :class:`BatchPresenter` is a :class:`~snapkv_cli.presenters.Presenter`, so a local batch's runner can also tell
it what its worker is doing (``progress``); the events of a single answer (streamed text...) it ignores. This base
shows nothing; the command line's Rich progress bar and summary table are in :mod:`snapkv_cli.cli.batch_presenter`.
"""

from __future__ import annotations

from ..presenters import Presenter
from .summary import BatchSummary


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
