"""The command line's shape: every model-running command takes every shared option, declared in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import click
import pytest
import typer.main
from typer.testing import CliRunner

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


def _probe_app(command):
    """A one-command app of ``command`` (decorated in the test with the shared options, as a new command would be),
    which fails cleanly as the real ones do."""
    import typer

    from snapkv_cli.cli.errors import fail_cleanly

    probe = typer.Typer()
    probe.command()(fail_cleanly(command))
    return probe


def _model_options_probe(seen: list):
    """A command with its own ``Path`` option and the model options; it records what it receives."""
    import typer

    from snapkv_cli.cli.options import model_options

    @model_options
    def show(out: Path = typer.Option(Path("default.txt"), "--out"), *, options) -> None:
        seen.append((out, options))

    return _probe_app(show)


def test_model_options_give_a_new_command_the_run_options_of_its_flags(tmp_path):
    """``model_options`` adds the model flags to a command and hands it ``options``: the model, device, dtype,
    device map and prefill chunk as given, the rest at the library's defaults; the command keeps its own options."""
    seen: list = []
    probe = _model_options_probe(seen)
    result = CliRunner().invoke(probe, ["--model", str(tmp_path), "--device", "cpu", "--dtype", "bfloat16",
                                        "--quantize", "none", "--device-map", "auto", "--prefill-chunk", "64",
                                        "--out", "mine.txt"])
    assert result.exit_code == 0, result.stderr
    [(out, options)] = seen
    assert out == Path("mine.txt")
    assert (options.model, options.device, options.dtype, options.quantize, options.device_map) == (
        str(tmp_path), "cpu", "bfloat16", None, "auto")
    assert options.generation.prefill_chunk == 64 and options.generation.max_new_tokens == 128
    seen.clear()
    assert CliRunner().invoke(probe, []).exit_code == 0
    [(out, options)] = seen
    assert out == Path("default.txt")
    assert (options.model, options.device, options.dtype, options.quantize, options.device_map) == (
        None, "auto", "auto", None, None)
    assert options.generation.prefill_chunk is None


@pytest.mark.parametrize("flags, expected", [
    (["--device", "gpu"], "Error: unknown device 'gpu'; use auto, cpu, cuda or cuda:N\n"),
    (["--dtype", "float64"], "Error: unknown dtype 'float64'; use auto, float32 (fp32), bfloat16 (bf16) or float16 "
                             "(fp16)\n"),
    (["--quantize", "q4"], "Error: unknown quantization 'q4'; use none or int8\n"),
    (["--model", "nope"], "Error: unknown model 'nope': the built-in models are "),
])
def test_model_options_refuse_bad_names_before_the_command_runs(flags, expected):
    seen: list = []
    result = CliRunner().invoke(_model_options_probe(seen), flags)
    assert result.exit_code == 1 and result.stdout == "" and seen == []
    assert result.stderr.startswith(expected) and result.stderr.count("\n") == 1


def test_model_options_pass_the_quantization_asked_for():
    pytest.importorskip("torchao")
    seen: list = []
    result = CliRunner().invoke(_model_options_probe(seen), ["--quantize", "INT8"])
    assert result.exit_code == 0, result.stderr
    assert seen[0][1].quantize == "int8"


def test_a_new_commands_own_options_may_be_written_the_annotated_way():
    """A command's own option declared as ``Annotated[type, typer.Option(...)]`` (in a module whose annotations are
    strings) keeps its flags beside the model options."""
    from snapkv_cli.cli.options import model_options

    seen: list = []

    @model_options
    def show(out: Annotated[Path, typer.Option("--output", "-o")] = Path("default.txt"), *, options) -> None:
        seen.append((out, options))

    result = CliRunner().invoke(_probe_app(show), ["-o", "mine.txt", "--device", "cpu"])
    assert result.exit_code == 0, result.stderr
    assert [(out, options.device) for out, options in seen] == [(Path("mine.txt"), "cpu")]

def test_run_options_give_a_new_command_its_choices_and_output():
    """``run_options`` hands a command the checked ``choices`` and the ``output``: JSON or text, quiet or not."""
    import typer

    from snapkv_cli.cli.options import run_options

    seen: list = []

    @run_options
    def show(out: Path = typer.Option(Path("default.txt"), "--out"), *, choices, output) -> None:
        seen.append((out, choices, output))

    probe = _probe_app(show)
    for flags, json_quiet in (([], (False, False)), (["--json", "-q"], (True, True)), (["--quiet"], (False, True))):
        seen.clear()
        result = CliRunner().invoke(probe, [*flags, "--budget", "64", "--out", "mine.txt"])
        assert result.exit_code == 0, result.stderr
        [(out, choices, output)] = seen
        assert out == Path("mine.txt") and (output.as_json, output.quiet) == json_quiet
        assert choices.settings.max_capacity_prompt == 64


@pytest.mark.parametrize("name, default", [("window_size", 32), ("kernel_size", 15), ("pooling", "maxpool"),
                                           ("gqa_aggregation", "mean")])
def test_a_benchmarks_shared_setting_has_asks_flag_and_help_and_the_command_lines_default(name, default):
    """The benchmarks' --window, --kernel, --pooling and --gqa (built here as a new benchmark would build them):
    ``ask``'s flag and help, the command line's default."""
    from snapkv_cli.cli.bench import _grid_option

    option = _grid_option(name)
    ask = _params(_command(["ask"]))[name]
    assert option.default == default
    assert list(option.param_decls) == ask.opts and option.help == ask.help and option.help


def test_every_package_folder_is_installed():
    """A package folder missing from pyproject's list works in an editable install and is absent from a wheel."""
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(init.parent.relative_to(root).parts) for init in (root / "snapkv_cli").rglob("__init__.py")}
    assert folders <= listed, sorted(folders - listed)
