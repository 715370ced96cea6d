"""What a run tells whoever shows it, beyond its progress: each question, its prompt, the finished answer, errors.

:class:`~snapkv_cli.answering.runner.Runner` tells a :class:`Presenter`; this base does nothing (a library caller
that wants nothing shown). It is a :class:`~snapkv_cli.progress.Progress`, which the runner hands down to the
session, generation and the model loader. The command line's presenters (terminal, JSON lines, chat, the batch's
progress bar and summary) are in :mod:`snapkv_cli.cli.presenters`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..progress import Progress

if TYPE_CHECKING:  # the presenters are imported before torch is
    from .prompting import Prompt
    from .report import Answer


class Presenter(Progress):
    """Receives the events of a run; every method does nothing here."""

    def question(self, question: str, index: int, total: int | None) -> None:
        """Question ``index`` (0-based) of ``total`` (None: open-ended, as in chat) is about to be asked."""

    def prompt(self, prompt: Prompt, window_size: int, index: int, total: int | None) -> None:
        """Its prompt is built (before the prefill)."""

    def answered(self, answer: Answer, index: int, total: int | None) -> None:
        """The answer is complete, with its report."""

    def failed(self, message: str, index: int) -> None:
        """Question ``index`` could not be answered: ``message`` says why (only runs that go on after an error,
        such as chat, report this)."""

    def close(self) -> None:
        """The run is over."""
