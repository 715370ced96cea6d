"""docs/usage.md follows the command line and the report: its command and option lists are what the generator makes of
the Typer app now, the generator follows the app (one more option changes it), and the JSON keys it documents are
the keys a real ``ask --json`` and ``inspect --json`` print."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest
import typer

import snapkv_cli.cli as cli
from tests.example_writer import make_examples
from tests.helpers import snapkv_json
from tools.docs import tables, usage_doc

USAGE = Path(__file__).resolve().parent.parent / "docs" / "usage.md"
BLOCKS = ["usage-index", "usage-commands", "json-schema ask", "json-schema inspect"]


def _blocks() -> dict[str, str]:
    return {match["spec"]: match["body"] for match in tables.BLOCK.finditer(USAGE.read_text(encoding="utf-8"))}


def test_usage_doc_is_what_the_generator_writes_now():
    blocks = _blocks()
    assert list(blocks) == BLOCKS
    for spec, body in blocks.items():
        assert body == tables.render_block(spec), f"{spec}: run python -m tools.docs.tables --write"


def test_a_new_command_and_option_make_the_doc_differ(monkeypatch):
    """A command added to the app makes docs/usage.md's lists differ (so the check fails) until they are rewritten,
    with its option under its panel."""
    monkeypatch.setattr(cli.app, "registered_commands", list(cli.app.registered_commands))

    @cli.app.command("extra")
    def extra(level: int = typer.Option(3, "--level", envvar="SNAPKV_LEVEL", rich_help_panel="Tuning",
                                        help="How hard to try.")) -> None:
        """Do something extra."""

    assert tables.process(write=False) == ["docs/usage.md: usage-index", "docs/usage.md: usage-commands"]
    reference = usage_doc.command_reference()
    section = reference.split("### `snapkv extra`")[1]
    assert "Do something extra." in section and "```\nsnapkv extra [OPTIONS]\n```" in section
    assert "**Tuning**\n\n| option | value | default | env var | meaning |" in section
    assert "| `--level` | `int` | `3` | `SNAPKV_LEVEL` | How hard to try. |" in section
    assert "[`snapkv extra`](#snapkv-extra)" in usage_doc.command_index()


def _small_app(with_seed: bool):
    app = typer.Typer(context_settings={"help_option_names": ["-h", "--help"]})

    @app.callback()
    def main() -> None:
        """A small app."""

    if with_seed:
        @app.command()
        def run(path: str = typer.Argument(..., help="The [bold]file[/bold] to read [1-3]."),
                model: Optional[str] = typer.Option(None, "--model", "-m", envvar="APP_MODEL", rich_help_panel="Model",
                                                    help="Which model."),
                fast: bool = typer.Option(True, "--fast/--slow", help="Speed."),
                steps: int = typer.Option(8, min=1, rich_help_panel="Model", help="Steps | rounds."),
                seed: int = typer.Option(0, rich_help_panel="Model", help="Random seed.")) -> None:
            """Run it.

            Twice if needed."""
    else:
        @app.command()
        def run(path: str = typer.Argument(..., help="The [bold]file[/bold] to read [1-3]."),
                model: Optional[str] = typer.Option(None, "--model", "-m", envvar="APP_MODEL", rich_help_panel="Model",
                                                    help="Which model."),
                fast: bool = typer.Option(True, "--fast/--slow", help="Speed."),
                steps: int = typer.Option(8, min=1, rich_help_panel="Model", help="Steps | rounds.")) -> None:
            """Run it.

            Twice if needed."""

    return app


def test_the_reference_groups_options_as_help_does_and_follows_one_more_option():
    """Per command: description, usage, arguments, the options without a panel, then each panel in the order of its
    first option; each option with its flags, value, default, env var and help (markup as --help resolves it; Markdown
    specials escaped). One more option changes the reference, in its panel."""
    before = usage_doc.command_reference(_small_app(with_seed=False))
    after = usage_doc.command_reference(_small_app(with_seed=True))
    assert before != after
    run = before.split("### `snapkv run`\n\n")[1]
    assert run.startswith("Run it.\n\nTwice if needed.\n\n```\nsnapkv run [OPTIONS] {path}\n```\n\n**Arguments**")
    assert "| `path` | `str` | yes |   | The file to read \\[1-3\\]. |" in run  # markup resolved, brackets escaped
    assert run.index("**Options**") < run.index("| `--fast` / `--slow` |") < run.index("**Model**")
    assert "| `--fast` / `--slow` | flag | `--fast` |   | Speed. |" in run
    assert "| `-h` / `--help` |" not in run and "| `--help` / `-h` | flag |" in run
    model = run.split("**Model**")[1]
    assert model.index("`--model` / `-m`") < model.index("`--steps`")
    assert "| `--model` / `-m` | `str` |   | `APP_MODEL` | Which model. |" in model
    assert "| `--steps` | `int`, >= 1 | `8` |   | Steps \\| rounds. |" in model
    assert "| `--seed` | `int` | `0` |   | Random seed. |" in after.split("**Model**")[1]
    assert "`--seed`" not in before


def test_the_generated_text_does_not_depend_on_the_terminal(monkeypatch):
    before = usage_doc.command_reference()
    monkeypatch.setenv("COLUMNS", "30")
    monkeypatch.setenv("FORCE_COLOR", "1")
    after = usage_doc.command_reference()
    assert after == before
    assert "\x1b[" not in after and "╭" not in after


def _key_paths(value, prefix: str = "") -> set[str]:
    """The key paths of a real JSON object, every element of every list looked at."""
    paths = set()
    for key, item in value.items():
        paths.add(prefix + key)
        if isinstance(item, dict):
            paths |= _key_paths(item, prefix + key + ".")
        elif isinstance(item, list):
            for element in item:
                if isinstance(element, dict):
                    paths |= _key_paths(element, prefix + key + "[].")
    return paths


@pytest.fixture(scope="module")
def report_pdf(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("usage-doc") / "report.pdf"
    path.write_bytes(make_examples.pdf_bytes(["The harbour office opens at seven.", "The ferry code is KX-41."]))
    return str(path)


def test_the_documented_ask_keys_are_the_keys_ask_prints(report_pdf, tiny_model_path, one_thread):
    printed = snapkv_json("ask", report_pdf, "What is the ferry code?", "--model", tiny_model_path,
                          "--max-new-tokens", "2", "--budget", "16", "--window", "4")
    documented = [path for path, _ in usage_doc.ask_keys()]
    assert _key_paths(printed) == set(documented)
    assert [path for path in documented if "." not in path] == list(printed)  # in the printed order


def test_the_documented_inspect_keys_are_the_keys_inspect_prints(report_pdf, tiny_model_path, one_thread):
    printed = snapkv_json("inspect", report_pdf, "What is the ferry code?", "--model", tiny_model_path, "--answer",
                          "--find", "KX-41", "--max-new-tokens", "2", "--budget", "16", "--window", "4")
    documented = [path for path, _ in usage_doc.inspect_keys()]
    assert _key_paths(printed) == set(documented)
    assert [path for path in documented if "." not in path] == list(printed)


def test_every_documented_key_has_a_meaning_and_every_meaning_a_key():
    ask = {path for path, _ in usage_doc.ask_keys()}
    inspect = {path for path, _ in usage_doc.inspect_keys()}
    assert [path for path in sorted(ask) if not usage_doc.MEANINGS.get(path)] == []
    assert [path for path in sorted(inspect) if not (usage_doc.INSPECT_MEANINGS.get(path)
                                                     or usage_doc.MEANINGS.get(path))] == []
    assert sorted(set(usage_doc.MEANINGS) - ask - inspect) == []
    assert sorted(set(usage_doc.INSPECT_MEANINGS) - inspect) == []
