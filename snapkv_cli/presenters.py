"""What a run tells whoever shows it: progress, prompts, the streamed answer, finished answers, per-question errors.

:class:`~snapkv_cli.runner.Runner` calls a :class:`Presenter`; this base does nothing (a library caller that wants
nothing shown). The command line's presenters (terminal, JSON lines, chat) are in :mod:`snapkv_cli.cli.presenters`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the presenters are imported before torch is
    from .pipeline import Answer
    from .prompting import Prompt


class Presenter:
    """Receives the events of a run; every method does nothing here."""

    def progress(self, message: str) -> None:
        """A step of the run is starting (loading, reading the document, prefilling...)."""

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
