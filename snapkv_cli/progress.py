"""What the lower layers tell of a run while it goes, one way, to whoever listens.

Generation, the answering session, the model loader and the document cache report through a :class:`Progress` and
import nothing above them; the richer :class:`~snapkv_cli.answering.presenter.Presenter` (questions, prompts,
finished answers) extends it, and the runner hands it down once.

Progress comes in steps: :meth:`Progress.progress` starts one of unknown length (fetching a model, converting it,
loading it), :meth:`Progress.phase` one of a known number of units that :meth:`Progress.advance` counts off (the
prefill's layers, chunk after chunk; the answer's tokens). A step lasts until the next one starts or the run ends.
:meth:`Progress.text` is the answer itself as it is generated.
"""

from __future__ import annotations


class Progress:
    """Receives a run's progress; every method does nothing here (a caller that wants nothing shown)."""

    def progress(self, message: str) -> None:
        """A step of the run of unknown length is starting (fetching or loading a model, saving a cache...)."""

    def phase(self, name: str, total: int | None, unit: str) -> None:
        """A step of ``total`` units of ``unit`` (layer forwards, tokens) is starting, counted off by :meth:`advance`
        (``total`` None: unknown). Here: told as ``progress(name)``, for listeners that show only messages."""
        self.progress(name)

    def advance(self, done: int = 1) -> None:
        """``done`` more units of the current phase are done."""

    def notice(self, message: str) -> None:
        """Something the user must see whatever the output is (a model's terms of use at its first fetch)."""

    def text(self, chunk: str) -> None:
        """More of the answer, as it is generated (in whole characters)."""
