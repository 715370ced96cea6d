"""``snapkv serve``: the model loaded once behind a local web page, a documents API and an OpenAI-compatible API.

The server itself is :mod:`snapkv_cli.server`; this command checks where it may listen (loopback, or any address
with an API key) before anything loads, loads the model with a progress display on stderr, and prints the URL.
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from ..errors import UserError
from ..server.security import API_KEY_ENV
from . import console
from .app import app
from .errors import fail_cleanly, message
from .options import SETTING_OPTIONS, Output, RunChoices, compression_settings, run_options

SERVE_PANEL = "Server"


def setting_names() -> dict[str, str]:
    """The names a request may give a compression setting by: the option's parameter name (``window_size``) and
    its flag's (``window``, ``budget``), either with ``-`` or ``_``."""
    from ..engine.settings import settings_declarations

    names = {}
    for option in SETTING_OPTIONS:
        flag = settings_declarations()[option.name].flag.partition("/")[0].removeprefix("--")
        for alias in (option.name, flag, flag.replace("-", "_"), option.name.replace("_", "-")):
            names[alias] = option.name
    return names


def settings_for(values: dict):
    """``overrides`` (a request's compression settings) -> the settings ``ask`` would use with those options added
    to the server's own."""
    names = setting_names()

    def parse(overrides: dict):
        from ..engine.settings import settings_declarations

        given = {}
        for key, value in overrides.items():
            if key not in names:
                raise UserError(f"unknown compression setting {key!r}: give one of "
                                f"{', '.join(sorted({name for name in names if '-' not in name}))}")
            declared = settings_declarations()[names[key]]
            given[names[key]] = str(value) if declared.parse is not None and value is not None else value
        return compression_settings({**values, **given})

    return parse


def build(choices: RunChoices, *, host: str = "127.0.0.1", port: int = 8000, api_key: Optional[str] = None,
          queue: int = 8, keep_mb: float = 2048, time_limit_s: Optional[float] = None, quiet: bool = True,
          on_started=None):
    """The server of ``choices`` (the model loaded), ready to listen: a
    :class:`~snapkv_cli.server.listen.Listener`. Refuses a non-loopback ``host`` without ``api_key`` first."""
    from ..server.security import check_binding

    api_key = api_key or None  # an empty key is no key
    check_binding(host, api_key)
    options = choices.build()
    from ..answering.presenter import Presenter
    from ..answering.runner import Runner
    from ..server.app import create_app
    from ..server.context import ServerContext
    from ..server.listen import Listener
    from ..server.worker import Relay
    from .presenters import ProgressPresenter

    loading = ProgressPresenter(console.stderr, quiet=quiet)
    relay = Relay(loading)
    runner = Runner(options, relay)
    try:
        runner.loaded  # noqa: B018  (loads the model once, before the first request)
    finally:
        loading.close()
    relay.idle = Presenter()  # between requests, nothing to show
    context = ServerContext(runner, relay, describe=message, settings_for=settings_for(choices.values), queue=queue,
                            keep_bytes=int(keep_mb * 2**20), time_limit_s=time_limit_s)
    return Listener(create_app(context, api_key=api_key), host, port, on_started=on_started)


@app.command()
@fail_cleanly
@run_options
def serve(
    host: str = typer.Option("127.0.0.1", "--host", rich_help_panel=SERVE_PANEL,
                             help="Address to listen on; any but a loopback one needs an API key."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, rich_help_panel=SERVE_PANEL,
                             help="Port to listen on (0: a free one)."),
    api_key: Optional[str] = typer.Option(
        None, "--api-key", envvar=API_KEY_ENV, rich_help_panel=SERVE_PANEL, show_envvar=True,
        help="Every request must carry this key (Authorization: Bearer KEY); prefer the environment variable, "
             "which other users cannot see in the process list."),
    queue: int = typer.Option(8, "--queue", min=1, rich_help_panel=SERVE_PANEL,
                              help="Requests that may wait for the model; more are refused (429, Retry-After)."),
    keep_mb: float = typer.Option(2048, "--keep-mb", min=0.0, rich_help_panel=SERVE_PANEL,
                                  help="Memory for the documents' prefilled prefixes, kept for their next questions "
                                       "(beyond it the least recently used is dropped; with --cache-docs it comes "
                                       "back from disk)."),
    time_limit: float = typer.Option(600.0, "--request-timeout", min=1.0, rich_help_panel=SERVE_PANEL,
                                     help="Seconds a request may run on the model before it is stopped."),
    *,
    choices: RunChoices,
    output: Output,
) -> None:
    """Serve the model: a web page at /, a documents API and an OpenAI-compatible API (/v1/chat/completions).

    The model loads once; each document's prefilled prefix is kept for its next question. With --json, one line on
    stdout says where it listens, once it does: {"url", "openai_base_url", "api_key_required"}.
    """

    def started(url: str) -> None:
        if output.as_json:
            sys.stdout.write(json.dumps({"url": url, "openai_base_url": f"{url}v1",
                                         "api_key_required": bool(api_key)}) + "\n")
            sys.stdout.flush()
        console.stderr.print(f"snapkv serves on {url} (Ctrl-C stops)", markup=False, highlight=False,
                             soft_wrap=True)

    build(choices, host=host, port=port, api_key=api_key, queue=queue, keep_mb=keep_mb, time_limit_s=time_limit,
          quiet=output.quiet, on_started=started).run()
