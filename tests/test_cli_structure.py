"""The command line's shape: every model-running command takes every shared option, declared in one place."""

from __future__ import annotations

import click
import pytest
import typer.main

from snapkv_cli.cli import app
from snapkv_cli.cli.options import MODEL_OPTIONS, RUN_OPTIONS

RUN_COMMANDS = ["ask", "inspect", "chat", "batch"]


def _command(path: list[str]):
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def _params(command) -> dict:
    return {param.name: param for param in command.params}


def _declared(param: click.Parameter) -> tuple:
    """What a user sees of an option: its flags, default, environment variable and type."""
    return (sorted(param.opts + param.secondary_opts), param.default, param.envvar, str(param.display_type),
            param.min, param.max, param.help)


@pytest.mark.parametrize("name", RUN_COMMANDS)
def test_every_run_command_takes_every_shared_option_the_same_way(name):
    params = _params(_command([name]))
    missing = [option.name for option in RUN_OPTIONS if option.name not in params]
    assert not missing, f"{name} lacks {missing}"
    for option in RUN_OPTIONS:
        assert _declared(params[option.name]) == _declared(_params(_command(["ask"]))[option.name]), option.name
    assert len(RUN_OPTIONS) >= 20  # model, prefill, compression, prompt, document cache and output options
    # the flags a user relies on, by name
    flags = {flag for option in RUN_OPTIONS for flag in params[option.name].opts}
    for flag in ("--model", "--device", "--dtype", "--device-map", "--prefill-chunk", "--method", "--budget",
                 "--window", "--kernel", "--pooling", "--gqa", "--max-new-tokens", "--temperature", "--seed",
                 "--pages", "--template", "--truncate", "--cache-docs", "--cache-size", "--json", "--quiet"):
        assert flag in flags, (name, flag)


@pytest.mark.parametrize("name", ["accuracy", "speed"])
def test_benchmarks_take_the_model_options_the_same_way(name):
    params = _params(_command(["bench", name]))
    ask = _params(_command(["ask"]))
    for option in MODEL_OPTIONS:
        assert option.name in params, f"bench {name} lacks {option.name}"
        assert _declared(params[option.name]) == _declared(ask[option.name]), option.name


def test_every_package_folder_is_installed():
    """A package folder missing from pyproject's list works in an editable install and is absent from a wheel."""
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(init.parent.relative_to(root).parts) for init in (root / "snapkv_cli").rglob("__init__.py")}
    assert folders <= listed, sorted(folders - listed)
