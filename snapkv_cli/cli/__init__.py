"""The ``snapkv`` command: one module per command, each parsing its own options and calling the library.

``app`` is the Typer application (``snapkv_cli.cli:main`` is the console script). Options shared by the commands
that run the model are declared once, in :mod:`.options`; errors become one line in :mod:`.errors`; the commands
drive :class:`snapkv_cli.answering.runner.Runner` with a presenter from :mod:`snapkv_cli.answering.presenter`.
"""

from __future__ import annotations

from . import ask, batch, bench, cache, chat, inspect, models, serve  # noqa: F401  (each registers its commands on the app)
from .app import EXAMPLE, app

__all__ = ["EXAMPLE", "app", "main"]


def main() -> None:
    """Console entry point."""
    app()
