"""docs/methods.md says of the settings what the code declares: the default method and the options it runs with,
every parameter it writes as ``name=value``, and the benchmark label suffixes with the options they stand for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snapkv_cli import defaults
from snapkv_cli.bench.grid import SUFFIXES
from snapkv_cli.engine.settings import CompressionSettings, cli_setting, settings_declarations

METHODS_DOC = Path(__file__).resolve().parent.parent / "docs" / "methods.md"
CODE_SPAN = re.compile(r"`([^`\n]*)`")


@pytest.fixture(scope="module")
def text() -> str:
    return METHODS_DOC.read_text(encoding="utf-8")


def option(name: str, value) -> str:
    """How the command line spells setting ``name`` set to ``value``: ``--flag value``, or a switch's on/off flag."""
    flag = settings_declarations()[name].flag
    if isinstance(value, bool):
        on, _, off = flag.partition("/")
        return on if value else off
    return f"{flag} {value}"


def default_method_paragraph(text: str) -> str:
    section = text.split("\n## The default method\n", 1)[1]
    return section.strip().split("\n\n", 1)[0]


def test_the_default_method_is_named_with_the_options_it_runs_with(text):
    options = " ".join([option("method", defaults.METHOD)]
                       + [option(name, value) for name, value in defaults.METHOD_SETTINGS.items()])
    assert options in CODE_SPAN.findall(default_method_paragraph(text))


def test_every_option_value_in_the_default_methods_paragraph_is_the_command_lines_default(text):
    flags = {declared.flag.partition("/")[0]: name for name, declared in settings_declarations().items()
             if declared.flag}
    checked = []
    for span in CODE_SPAN.findall(default_method_paragraph(text)):
        for flag, value in re.findall(r"(--[a-z-]+) ([^\s`]+)", span):
            name = flags.get(flag)
            if name is None:
                continue
            expected = defaults.METHOD if name == "method" else defaults.METHOD_SETTINGS.get(
                name, cli_setting(name))
            assert value == str(expected), f"{flag} {value}: the command line's default is {expected}"
            checked.append(flag)
    assert {"--method", "--budget", "--window", "--kernel"} <= set(checked)


def test_every_parameter_written_as_name_equals_value_is_the_declared_one(text):
    from snapkv_cli.engine.policies.criticalkv import EPSILON
    from snapkv_cli.engine.words import MAX_WORD_TOKENS

    declared = {name: field.default for name, field in CompressionSettings.__dataclass_fields__.items()}
    declared |= {"EPSILON": EPSILON, "MAX_WORD_TOKENS": MAX_WORD_TOKENS}
    written = [match for span in CODE_SPAN.findall(text)
               for match in re.findall(r"^(\w+)=([0-9.e+-]+)$", span)]
    assert len(written) >= 5
    for name, value in written:
        assert name in declared, f"`{name}={value}`: no such setting or constant"
        assert float(value) == float(declared[name]), f"`{name}={value}`: the code says {declared[name]}"


def test_the_label_suffixes_table_lists_every_suffix_with_its_option_in_label_order(text):
    rows = re.findall(r"^\| `\+(\w+)` \| `([^`]*)` \|", text, re.M)
    assert rows == [(suffix, option(name, declared.value)) for suffix, (name, declared) in SUFFIXES.items()]
