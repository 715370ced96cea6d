"""``snapkv models list|pull``: the built-in models and what is cached."""

from __future__ import annotations

import json
from typing import Optional

import typer

from .. import console
from .app import models_app
from .errors import fail_cleanly


@models_app.command("list")
@fail_cleanly
def models_list(as_json: bool = typer.Option(False, "--json", help="Print JSON on stdout.")) -> None:
    """Show the default model and whether it is cached."""
    from ..models.default_model import default_model_status

    status = default_model_status()
    if as_json:
        typer.echo(json.dumps(status))
        return
    state = "cached" if status["present"] else "not downloaded yet (snapkv models pull)"
    typer.echo(f"{status['name']}\t{state}\t{status['path']}")


@models_app.command("pull")
@fail_cleanly
def models_pull(
    name: Optional[str] = typer.Argument(None, help="Model to fetch (default: the default model)."),
) -> None:
    """Fetch and convert a model now, so later runs need no network."""
    from ..models.loader import load_model

    with console.stderr.status("Fetching model...", spinner="dots") as status:
        loaded = load_model(name, device="cpu", dtype="float32", progress=status.update)
    typer.echo(loaded.source)
