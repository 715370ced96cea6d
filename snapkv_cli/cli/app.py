"""The ``snapkv`` Typer application and its command groups; the command modules register themselves on these."""

from __future__ import annotations

import typer

from .. import __version__

EXAMPLE = 'snapkv ask examples/annual_report.pdf "Who is the chief executive?"'

app = typer.Typer(
    help=f"Ask questions of long documents with a local LLM whose KV cache is compressed by SnapKV.\n\n"
         f"Example:\n\n    {EXAMPLE}",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
models_app = typer.Typer(help="The built-in models and what is cached.", no_args_is_help=True)
cache_app = typer.Typer(help="The on-disk cache of prefilled documents (ask/chat --cache-docs).", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(cache_app, name="cache")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"snapkv {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Ask questions of long documents with a local LLM whose KV cache is compressed by SnapKV."""
