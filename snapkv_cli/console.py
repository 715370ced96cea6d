"""The stderr console every command reports on, and the one way commands turn errors into ``Error:`` lines."""

from __future__ import annotations

import functools
import os

import typer
from rich.console import Console
from rich.status import Status
from rich.text import Text

from .errors import UserError

DEBUG_ENV = "SNAPKV_DEBUG"


class PlainStatus(Status):
    """A spinner whose messages are plain text: progress names paths and models, which may look like Rich markup
    (``--model './models/my[/]model'``)."""

    def __init__(self, status, **options):
        super().__init__(Text(status) if isinstance(status, str) else status, **options)

    def update(self, status=None, **options) -> None:
        super().update(Text(status) if isinstance(status, str) else status, **options)


class _Console(Console):
    def status(self, status, **options) -> PlainStatus:
        return PlainStatus(status, console=self, **options)


stderr = _Console(stderr=True, highlight=False)


def fail_cleanly(command):
    """User mistakes become one ``Error:`` line and exit 1; other errors too, unless SNAPKV_DEBUG is set."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):  # typer vendors click: usage errors exit 2
            raise
        except UserError as error:
            if os.environ.get(DEBUG_ENV):
                raise
            stderr.print(f"Error: {error}", markup=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            stderr.print("Interrupted", markup=False)
            raise typer.Exit(130) from None
        except Exception as error:
            if os.environ.get(DEBUG_ENV):
                raise
            stderr.print(f"Error: {type(error).__name__}: {error} (set {DEBUG_ENV}=1 for the traceback)",
                         markup=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper
