"""Settings, methods and generation options are declared once: a setting added to the settings' declaration and a
method added to the registry reach the command line (its options, their help, the check of a value), the report (the
JSON settings block and the terminal panel), the benchmarks' labels and their help, and the README's table of methods;
generation options added to their declaration reach every command's options and their help, the run's options, the
check of a value, the report's JSON and the flags the error lines name; all with no other edit.

The fixtures import the package afresh with the declarations extended, as if the new entries had been typed there;
everything else must follow from them.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

PACKAGE = "snapkv_cli"
ROOT = Path(__file__).resolve().parent.parent
NOTES = ("Skerrow Point Light, winter log. The lamp was lit at dusk and the wind came round to the north-west. "
         "Duncan Hale repaired the fog signal and oiled the clockwork before the storm. The relief boat Morven Lass "
         "arrived on Tuesday with coal, letters and fresh bread.\n")
# the report's settings block as the JSON schema has it, before the new setting
SETTINGS_KEYS = ["window_size", "max_capacity_prompt", "budget", "kernel_size", "pooling", "pooling_window",
                 "gqa_aggregation", "layer_budgets", "head_budgets", "whole_words"]


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


@contextmanager
def fresh_package():
    """The package imported afresh inside the block (a test extends its declarations there); the modules as they
    were come back after."""
    saved = {name: module for name, module in sys.modules.items() if _ours(name)}
    for name in saved:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [name for name in sys.modules if _ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


@pytest.fixture
def extended():
    """A fresh import of the package whose settings declare one more setting (``dummy_knob``: ``--dummy-knob
    quiet|loud``, shown as "loud knob", benchmark suffix ``+loudknob``) and whose registry holds one more method
    (``dummykv``: SnapKV's policy under another name, pooling its votes); the package as it was comes back after."""
    with fresh_package():
        settings = importlib.import_module(f"{PACKAGE}.engine.settings")
        engine = importlib.import_module(f"{PACKAGE}.engine")

        @dataclass(frozen=True)
        class CompressionSettings(settings.CompressionSettings):
            dummy_knob: str = settings.setting(
                "quiet", flag="--dummy-knob", help="A knob no method reads",
                choices={"quiet": "", "loud": "turned up"}, reported=True, label="{} knob",
                suffixes=(settings.Suffix("loudknob", "loud", "the knob turned up", rank=6),))

        settings.CompressionSettings = engine.CompressionSettings = CompressionSettings
        methods = importlib.import_module(f"{PACKAGE}.engine.methods")
        policies = importlib.import_module(f"{PACKAGE}.engine.policies")
        methods.METHODS["dummykv"] = methods.Method("dummykv", "SnapKV's votes under a dummy name",
                                                    "what SnapKV keeps", "[Dummy](https://example.org/dummy)",
                                                    pools_votes=True)

        class DummyPolicy(policies.POLICIES["snapkv"], method="dummykv"):
            pass

        policies.POLICIES["dummykv"] = DummyPolicy
        yield importlib.import_module(f"{PACKAGE}.cli")


@pytest.fixture
def extended_generation():
    """A fresh import of the package whose generation options declare three more: ``dummy_stop`` (``--dummy-stop/
    --no-dummy-stop``, off by default, shown in the report's stop block as ``dummy_stopped``), which the commands that
    answer take, ``dummy_chunk`` (``--dummy-chunk``, env ``SNAPKV_DUMMY_CHUNK``), a model option, which the
    benchmarks take too, and ``dummy_mode`` (``--dummy-mode plain|fancy``, ``f`` for fancy), a model option with
    choices; no code reads any of them. The package as it was comes back after."""
    with fresh_package():
        options = importlib.import_module(f"{PACKAGE}.generation.options")
        generation = importlib.import_module(f"{PACKAGE}.generation")

        @dataclass(frozen=True)
        class GenerationOptions(options.GenerationOptions):
            dummy_stop: bool = options.option(
                False, flag="--dummy-stop/--no-dummy-stop", json="dummy_stopped", reported=True,
                help="End an answer at a dummy marker no decoder reads, before {max_new_tokens}.")
            dummy_chunk: int = options.option(7, flag="--dummy-chunk", min=2, envvar="SNAPKV_DUMMY_CHUNK",
                                              with_model=True, help="A chunk no prefill reads.")
            dummy_mode: str = options.option("plain", flag="--dummy-mode", with_model=True, aliases={"f": "fancy"},
                                             choices={"plain": "", "fancy": "turned fancy"},
                                             help="A mode no decoder reads.")

        options.GenerationOptions = generation.GenerationOptions = GenerationOptions
        yield importlib.import_module(f"{PACKAGE}.cli")


def _shown(text: str) -> str:
    """Rich's text without its box characters and line wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_a_new_setting_and_method_reach_the_cli_report_bench_and_docs(extended, tiny_model_path, tmp_path):
    runner = CliRunner()
    app = extended.app
    # the options of every model-running command, their help and the check of a value
    for command in ("ask", "inspect", "chat", "batch"):
        shown = _shown(runner.invoke(app, [command, "--help"]).stdout)
        assert "--dummy-knob" in shown and "A knob no method reads: quiet or loud (turned up)." in shown, command
        assert "dummykv (SnapKV's votes under a dummy name)" in shown, command
    document = tmp_path / "notes.txt"
    document.write_text(NOTES, encoding="utf-8")
    run = [str(document), "Who repaired the fog signal?", "--model", tiny_model_path, "--max-new-tokens", "2",
           "--budget", "48", "--window", "8"]
    refused = runner.invoke(app, ["ask", *run, "--dummy-knob", "deafening"])
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.startswith("Error: unknown dummy_knob 'deafening': choose quiet or loud")
    unknown = runner.invoke(app, ["ask", *run, "--method", "lru"])
    assert unknown.exit_code == 1 and "dummykv" in unknown.stderr

    # the report: the JSON settings block gains the setting (last, the schema's keys unchanged), the panel shows it
    answered = runner.invoke(app, ["ask", *run, "--method", "dummykv", "--dummy-knob", "loud", "--json", "--quiet"])
    assert answered.exit_code == 0, answered.stderr
    report = json.loads(answered.stdout)
    assert report["method"] == "dummykv"
    assert list(report["settings"]) == [*SETTINGS_KEYS, "dummy_knob"] and report["settings"]["dummy_knob"] == "loud"
    default = json.loads(runner.invoke(app, ["ask", *run, "--method", "snapkv", "--json", "--quiet"]).stdout)
    assert default["settings"]["dummy_knob"] == "quiet"
    panel = runner.invoke(app, ["ask", *run, "--method", "dummykv", "--dummy-knob", "loud"])
    assert panel.exit_code == 0, panel.stderr
    assert ("dummykv budget 48, kernel 15, maxpool, centered window, uniform layers, uniform heads, loud knob"
            in _shown(panel.stderr))

    # the benchmarks: the labels, what a label sets, the --methods help
    from snapkv_cli.bench.grid import MethodGrid, method_labels

    labels = method_labels()
    assert {"dummykv", "dummykv+loudknob", "snapkv+loudknob", "dummykv+causalpool+loudknob"} <= set(labels)
    assert "full+loudknob" not in labels  # the full cache keeps everything, whatever the knob
    cell = MethodGrid().settings("dummykv+causalpool+loudknob", 64)
    assert (cell.method, cell.pooling_window, cell.dummy_knob) == ("dummykv", "causal", "loud")
    for bench in ("accuracy", "niah"):
        shown = _shown(runner.invoke(app, ["bench", bench, "--help"]).stdout)
        assert "+loudknob (the knob turned up, for any compressing method)" in shown, bench
        assert "a method (full, snapkv, " in shown and "dummykv" in shown.split("optionally with")[0], bench
        # dummykv pools its votes: the causal window now applies to more compressing methods than not
        assert ("+causalpool (the causal pooling window, for any compressing method but chunkkv, h2o, tova, "
                "streamingllm and random)") in shown, bench
    rejected = runner.invoke(app, ["bench", "accuracy", "--methods", "dummykv+loudknob+causalpool"])
    assert rejected.exit_code == 1 and "dummykv+causalpool+loudknob" in rejected.stderr  # the label's order

    # the README's table of methods
    from tools.docs import methods_table  # reads the registry when it renders, so it sees the extended one
    assert "| `dummykv` | [Dummy](https://example.org/dummy) | what SnapKV keeps |" in methods_table.methods_table()


def test_new_generation_options_reach_every_command_its_help_the_run_the_json_and_the_errors(
        extended_generation, tiny_model_path, tmp_path):
    runner = CliRunner()
    app = extended_generation.app
    # every command that answers takes both, with their help (naming the other options' flags)
    for command in ("ask", "inspect", "chat", "batch"):
        shown = _shown(runner.invoke(app, [command, "--help"]).stdout)
        assert "--dummy-stop --no-dummy-stop" in shown, command
        assert "End an answer at a dummy marker no decoder reads, before --max-new-tokens." in shown, command
        assert "--dummy-chunk" in shown and "A chunk no prefill reads." in shown, command
        assert "SNAPKV_DUMMY_CHUNK" in shown, command
        assert "--dummy-mode" in shown and "A mode no decoder reads: plain or fancy (turned fancy)." in shown, command
    # the benchmarks take the model's ones, not the answer's
    for bench in ("accuracy", "sample", "speed", "niah"):
        shown = _shown(runner.invoke(app, ["bench", bench, "--help"]).stdout)
        assert "--dummy-chunk" in shown and "--dummy-mode" in shown and "--dummy-stop" not in shown, bench

    # the run's options and the report's JSON (ask's and inspect's stop block)
    from snapkv_cli.answering.runner import Runner

    seen = []
    original = Runner.__init__

    def recording(self, options, *args, **kwargs):
        seen.append(options.generation)
        original(self, options, *args, **kwargs)

    Runner.__init__ = recording
    try:
        document = tmp_path / "notes.txt"
        document.write_text(NOTES, encoding="utf-8")
        run = [str(document), "Who repaired the fog signal?", "--model", tiny_model_path, "--max-new-tokens", "2",
               "--json", "--quiet"]
        for command in ("ask", "inspect"):
            given = runner.invoke(app, [command, *run, "--dummy-stop", "--dummy-chunk", "9", "--dummy-mode", "F"])
            assert given.exit_code == 0, given.stderr
            assert json.loads(given.stdout)["stop"]["dummy_stopped"] is True, command
            default = runner.invoke(app, [command, *run])
            assert json.loads(default.stdout)["stop"]["dummy_stopped"] is False, command
    finally:
        Runner.__init__ = original
    assert [(options.dummy_stop, options.dummy_chunk, options.dummy_mode, options.max_new_tokens)
            for options in seen] == [(True, 9, "fancy", 2), (False, 7, "plain", 2)] * 2
    refused = runner.invoke(app, ["ask", *run, "--dummy-chunk", "1"])
    assert refused.exit_code == 2 and "--dummy-chunk" in refused.stderr  # below its declared lowest value
    # a value outside its declared choices: one error line naming its flag, before any model loads, benchmarks too
    for command in (["ask", *run], ["bench", "speed"]):
        unknown = runner.invoke(app, [*command, "--dummy-mode", "loud"])
        assert unknown.exit_code == 1 and unknown.stdout == "", command
        assert unknown.stderr == "Error: --dummy-mode must be plain or fancy, got 'loud'\n", command

    # the error lines name its flag where the library names the option
    from snapkv_cli.cli.errors import message
    from snapkv_cli.errors import InvalidValue

    assert message(InvalidValue("dummy_chunk", "3", "a multiple of 2")) == (
        "--dummy-chunk must be a multiple of 2, got '3'")
    assert message(InvalidValue("dummy_stop", "maybe", "on or off")).startswith("--dummy-stop must be on or off")


def test_the_declarations_and_the_command_line_load_without_torch():
    """The options and their help come from the declarations before any model loads: reading them imports no torch."""
    code = ("import sys, snapkv_cli.cli, snapkv_cli.bench.grid, snapkv_cli.engine\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_a_commands_own_generation_option_keeps_its_declaration_and_changes_only_what_it_is_given():
    from snapkv_cli.cli.options import generation_option
    from snapkv_cli.generation.options import generation_declarations, generation_default

    declared = generation_declarations()["max_new_tokens"]
    own = generation_option("max_new_tokens")
    assert (own.default, own.param_decls, own.min, own.envvar) == (
        generation_default("max_new_tokens"), (declared.flag,), declared.min, declared.envvar)
    assert own.show_default is True and own.help.startswith(declared.help)
    changed = generation_option("max_new_tokens", 48, shown="per task", min=2)
    assert (changed.default, changed.min, changed.show_default, changed.param_decls) == (
        48, 2, "per task", (declared.flag,))
    assert generation_option("max_new_tokens", None).default is None
