"""``CompressionSettings`` validates every value once, with a message that names the fix, and turns a budget fraction
into tokens for a given prompt. Each rule is checked at its boundary: the last value accepted and the first refused.
"""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from snapkv_cli.engine import CompressionSettings
from snapkv_cli.engine.settings import MAX_CONTEXT_TOKENS
from snapkv_cli.errors import BudgetTooSmall


def refused(message: str, **values) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        CompressionSettings(**values)


@pytest.mark.parametrize(("values", "message"), [
    ({"method": "lru"}, "unknown method 'lru': choose "),
    ({"window_size": 0}, "window_size must be a positive integer, got 0"),
    ({"window_size": 2.0}, "window_size must be a positive integer, got 2.0"),
    ({"max_capacity_prompt": "1024"}, "max_capacity_prompt must be a token count or a fraction, got '1024'"),
    ({"max_capacity_prompt": True}, "max_capacity_prompt must be a token count or a fraction, got True"),
    ({"max_capacity_prompt": 1.5}, "max_capacity_prompt 1.5 is neither a token count nor a fraction in (0, 1): "
                                   "give e.g. 1024 or 0.1"),
    ({"max_capacity_prompt": 32, "window_size": 32},
     "max_capacity_prompt (32) must exceed window_size (32): raise the budget or shrink the window"),
    ({"kernel_size": 4}, "kernel_size must be a positive odd integer such as 5 or 7, got 4"),
    ({"kernel_size": -1}, "kernel_size must be a positive odd integer such as 5 or 7, got -1"),
    ({"kernel_size": 1.5}, "kernel_size must be a positive odd integer such as 5 or 7, got 1.5"),
    ({"pooling": "minpool"}, "unknown pooling 'minpool': choose avgpool or maxpool"),
    ({"pooling_window": "left"}, "unknown pooling_window 'left': choose centered or causal"),
    ({"whole_words": "yes"}, "whole_words must be True or False, got 'yes'"),
    ({"gqa_aggregation": "sum"}, "unknown gqa_aggregation 'sum': choose mean or max"),
    ({"sink_tokens": -1}, "sink_tokens must be >= 0, pyramid_beta and query_block_size >= 1"),
    ({"pyramid_beta": 0}, "sink_tokens must be >= 0, pyramid_beta and query_block_size >= 1"),
    ({"query_block_size": 0}, "sink_tokens must be >= 0, pyramid_beta and query_block_size >= 1"),
    ({"layer_budgets": "flat"}, "unknown layer_budgets 'flat': choose uniform or pyramid"),
    ({"head_budgets": "greedy"}, "unknown head_budgets 'greedy': choose uniform, adaptive or shared"),
    ({"head_floor": True}, "head_floor must be a fraction between 0 and 1, got True"),
    ({"head_floor": 1.01}, "head_floor must be a fraction between 0 and 1, got 1.01"),
    ({"critical_first_stage": -0.1}, "critical_first_stage must be a fraction between 0 and 1, got -0.1"),
    ({"chunk_size": True}, "chunk_size must be a positive integer, got True"),
    ({"chunk_size": 0}, "chunk_size must be a positive integer, got 0"),
])
def test_a_bad_value_is_refused_with_a_message_that_names_the_fix(values, message):
    if message.endswith("choose "):  # every method of the registry
        from snapkv_cli.engine.policies import POLICY_NAMES

        message += f"{', '.join(POLICY_NAMES[:-1])} or {POLICY_NAMES[-1]}"
    refused(message, **values)


@pytest.mark.parametrize("values", [
    {"window_size": 1, "max_capacity_prompt": 2},
    {"max_capacity_prompt": 33, "window_size": 32},
    {"kernel_size": 1},
    {"sink_tokens": 0, "pyramid_beta": 1, "query_block_size": 1},
    {"head_floor": 0.0, "critical_first_stage": 1.0},
    {"head_floor": 1, "critical_first_stage": 0},
    {"chunk_size": 1},
    {"max_capacity_prompt": 1024.0},  # a whole float is a token count
])
def test_the_boundary_values_are_accepted(values):
    CompressionSettings(**values)


def test_a_fraction_that_keeps_no_more_than_the_window_of_any_context_is_refused_before_a_model_loads():
    exact = 32 / MAX_CONTEXT_TOKENS  # exactly the window of the largest context: still nothing to choose
    with pytest.raises(BudgetTooSmall) as caught:
        CompressionSettings(window_size=32, max_capacity_prompt=exact)
    error = caught.value
    assert (error.budget, error.tokens, error.window_size, error.prompt_tokens) == (exact, 32, 32, MAX_CONTEXT_TOKENS)
    CompressionSettings(window_size=31, max_capacity_prompt=exact)  # one token more than the window: allowed


def test_a_fraction_becomes_tokens_of_each_prompt():
    half = CompressionSettings(window_size=8, max_capacity_prompt=0.5)
    assert half.is_fraction and half.capacity_for(100) == 50 and half.capacity_for(101) == 51
    assert half.capacity_for(8) == 8 and half.capacity_for(5) == 5  # the prompt is the window: everything
    with pytest.raises(BudgetTooSmall) as caught:
        half.capacity_for(16)  # 8 tokens: no more than the window
    error = caught.value
    assert (error.budget, error.tokens, error.window_size, error.prompt_tokens) == (0.5, 8, 8, 16)
    assert str(error) == ("budget fraction 0.5 of a 16-token prompt is 8 tokens, not more than the window (8): "
                          "raise the budget or shrink the window")
    assert half.capacity_for(17) == 9
    count = CompressionSettings(window_size=8, max_capacity_prompt=64)
    assert not count.is_fraction and count.capacity_for(10) == 64 and count.capacity_for(10_000) == 64


def test_as_dict_holds_every_field():
    settings = CompressionSettings(method="pyramidkv", window_size=16, max_capacity_prompt=0.25, kernel_size=7)
    values = settings.as_dict()
    assert list(values) == [f.name for f in fields(CompressionSettings)]
    assert CompressionSettings(**values) == settings


def test_a_setting_declared_with_setting_keeps_its_default_and_its_declaration():
    """The declaration helper every field of CompressionSettings goes through, on a class of its own: the field's
    default is the value a bare instance holds, and the declaration is what settings_declarations reads back."""
    from dataclasses import dataclass

    from snapkv_cli.engine.settings import Setting, setting, settings_declarations

    @dataclass
    class Knobs:
        size: int = setting(3, help="how big", flag="--size")
        shape: str = setting("round", choices=("round", "square"))
        plain: int = 7

    assert Knobs().size == 3 and Knobs().shape == "round"
    assert settings_declarations(Knobs) == {"size": Setting(help="how big", flag="--size"),
                                            "shape": Setting(choices=("round", "square"))}


@pytest.mark.parametrize(("values", "said"), [(["mean"], "mean"), (["mean", "max"], "mean or max"),
                                              (["uniform", "adaptive", "shared"], "uniform, adaptive or shared"),
                                              ((1, 2), "1 or 2")])
def test_alternatives_are_listed_as_a_sentence(values, said):
    from snapkv_cli.engine.settings import alternatives

    assert alternatives(values) == said


@pytest.mark.parametrize(("text", "budget"), [("1024", 1024), ("1", 1), ("2.0", 2), ("0.1", 0.1), ("0.999", 0.999)])
def test_a_budget_is_read_as_a_token_count_or_a_fraction(text, budget):
    from snapkv_cli.engine.settings import parse_budget

    parsed = parse_budget(text)
    assert parsed == budget and type(parsed) is type(budget)


@pytest.mark.parametrize(("text", "expected"), [
    ("lots", "a token count (e.g. 1024) or a fraction (e.g. 0.1)"),
    ("0", "a token count >= 1 or a fraction in (0, 1)"), ("-0.5", None), ("-3", None), ("1.5", None)])
def test_a_budget_that_is_neither_is_refused_with_what_is_accepted(text, expected):
    from snapkv_cli.engine.settings import parse_budget
    from snapkv_cli.errors import InvalidValue

    expected = expected or "a token count >= 1 or a fraction in (0, 1)"
    with pytest.raises(InvalidValue, match=f"^budget must be {re.escape(expected)}, got {re.escape(repr(text))}$"):
        parse_budget(text)


def test_the_applied_settings_name_the_methods_own_choices_and_the_budget_in_tokens_and_as_given():
    """What a report shows: every reported setting in declaration order, PyramidKV's own layer and head allotment
    where none was chosen, a chosen one where it was, and a fraction budget as tokens of this prompt and as given."""
    own = CompressionSettings(method="pyramidkv", window_size=8, max_capacity_prompt=0.25, kernel_size=7,
                              pooling="maxpool", whole_words=True)
    assert list(own.applied(1000).items()) == [
        ("window_size", 8), ("max_capacity_prompt", 250), ("budget", 0.25), ("kernel_size", 7), ("pooling", "maxpool"),
        ("pooling_window", "centered"), ("gqa_aggregation", "mean"), ("layer_budgets", "pyramid"),
        ("head_budgets", "uniform"), ("whole_words", True)]
    chosen = CompressionSettings(method="pyramidkv", layer_budgets="uniform", head_budgets="shared",
                                 max_capacity_prompt=512, gqa_aggregation="max")
    applied = chosen.applied(1000)
    assert applied["layer_budgets"] == "uniform" and applied["head_budgets"] == "shared"
    assert applied["max_capacity_prompt"] == 512 and applied["budget"] == 512 and applied["gqa_aggregation"] == "max"


def test_the_command_line_default_is_its_own_where_it_has_one_else_the_library_s(monkeypatch):
    from snapkv_cli import defaults
    from snapkv_cli.engine.settings import cli_setting, library_default, with_defaults

    monkeypatch.setattr(defaults, "CLI_DEFAULTS", {"window_size": 16})
    assert cli_setting("window_size") == 16 != library_default("window_size")
    assert cli_setting("kernel_size") == library_default("kernel_size") == CompressionSettings().kernel_size
    assert with_defaults("window {window_size}, kernel {kernel_size}") == (
        f"window {CompressionSettings().window_size}, kernel {CompressionSettings().kernel_size}")
