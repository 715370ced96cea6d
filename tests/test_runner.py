"""The runner's path for one question: what it hands the session and the presenter, and when an answer's time
starts."""

from __future__ import annotations

import time

import pytest

from snapkv_cli.answering.documents import Document, Page
from snapkv_cli.answering.runner import Runner, RunOptions
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.generation import GenerationOptions
from tests.helpers import recording_presenter

TEXT = "Harbor notes. The vault code is 4512. The ferry leaves at 7 in the morning. " * 4


@pytest.fixture
def runner(tiny_model_path):
    options = RunOptions(model=tiny_model_path, settings=CompressionSettings(method="snapkv", max_capacity_prompt=32,
                                                                             window_size=8),
                         generation=GenerationOptions(max_new_tokens=4, stop_at_eos=False))
    return Runner(options, recording_presenter())


def document() -> Document:
    return Document(source="notes.txt", kind="text", pages=(Page(number=1, text=TEXT),))


def test_without_generating_the_answer_stops_after_the_selection_on_the_same_prompt(runner):
    answered = runner.answer(runner.open(document(), questions=1), "What is the vault code?")
    inspected = runner.answer(runner.open(document(), questions=1), "What is the vault code?", generate=False)
    assert answered.report.generated_tokens == 4 and inspected.report.generated_tokens == 0
    assert inspected.report.prompt_tokens == answered.report.prompt_tokens
    several = runner.ask(document(), ["What is the vault code?", "When does the ferry leave?"], generate=False)
    assert [answer.report.generated_tokens for answer in several] == [0, 0]


def test_an_answers_time_starts_before_its_prompt_is_built(runner, monkeypatch):
    session = runner.open(document(), questions=1)
    build = session.build_prompt

    def slow(question, *args, **kwargs):
        time.sleep(0.3)
        return build(question, *args, **kwargs)

    monkeypatch.setattr(session, "build_prompt", slow)
    answer = runner.answer(session, "What is the vault code?")
    assert answer.report.timings.wall_s >= 0.3
