"""The stderr console every command reports on (progress, reports, errors); stdout carries only answers.

Read it as ``console.stderr`` at the time of use (not ``from .console import stderr``), so it can be replaced.
"""

from __future__ import annotations

from rich.console import Console
from rich.status import Status
from rich.text import Text


class PlainStatus(Status):
    """A spinner whose messages are plain text: progress names paths and models, which may look like Rich markup
    (``--model './models/my[/]model'``)."""

    def __init__(self, status, **options):
        super().__init__(Text(status) if isinstance(status, str) else status, **options)

    def update(self, status=None, **options) -> None:
        super().update(Text(status) if isinstance(status, str) else status, **options)


class PlainConsole(Console):
    """A console whose ``status`` spinners show their messages as plain text."""

    def status(self, status, **options) -> PlainStatus:
        return PlainStatus(status, console=self, **options)


stderr = PlainConsole(stderr=True, highlight=False)
