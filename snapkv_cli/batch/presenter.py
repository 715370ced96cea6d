"""What a batch tells whoever shows it: its plan, each line written, workers lost, the end.

The command line's batch presenter (a progress bar and a summary) is in :mod:`snapkv_cli.cli.presenters`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..answering.presenter import Presenter

if TYPE_CHECKING:
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
