"""``snapkv models list|pull``: the built-in models and what is cached."""

from __future__ import annotations

import json
from typing import Optional

import typer

from . import console
from .app import models_app
from .errors import fail_cleanly


@models_app.command("list")
@fail_cleanly
def models_list(as_json: bool = typer.Option(False, "--json", help="Print JSON on stdout.")) -> None:
    """Show the built-in models (name, parameters, context, licence, cached, size on disk)."""
    from ..models.catalog import catalogue_rows

    rows = catalogue_rows()
    if as_json:
        typer.echo(json.dumps(rows))
        return
    table = [("name", "parameters", "context", "licence", "cached", "size on disk")]
    for row in rows:
        table.append((row["name"] + (" (default)" if row["default"] else ""), row["parameters"] or "?",
                      f"{row['context']:,}" if row["context"] else "?", row["licence"] or "?",
                      "yes" if row["cached"] else "no", f"{row['size_bytes'] / 1e6:,.0f} MB" if row["cached"] else "-"))
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    for line in table:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    if not all(row["cached"] for row in rows):
        typer.echo("\nsnapkv models pull NAME fetches one now; --model NAME uses it (fetched on first use).")


@models_app.command("pull")
@fail_cleanly
def models_pull(
    name: Optional[str] = typer.Argument(None, help="Model to fetch (default: the default model)."),
) -> None:
    """Fetch and convert a model now, so later runs need no network."""
    from ..models.sources import check_reachable, model_source

    origin = model_source(name)  # a name that is no model fails here, before torch is imported
    check_reachable(origin)
    from ..models.loader import load_model
    from .presenters import ProgressPresenter

    presenter = ProgressPresenter(console.stderr)
    try:
        presenter.progress("Fetching model...")
        loaded = load_model(name, device="cpu", dtype="float32", progress=presenter.progress,
                            notice=presenter.notice)
    finally:
        presenter.close()
    typer.echo(loaded.source)
