"""Benchmark tasks, scoring and a seconds-long smoke run of both benchmarks on the tiny model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from snapkv_cli.bench.accuracy import Outcome, overall, summarize
from snapkv_cli.bench.tasks import TASKS, make_tasks
from snapkv_cli.cli import app
from tests.tiny_models import tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.mark.parametrize("kind", list(TASKS))
def test_tasks_are_deterministic_and_well_formed(tokenizer, kind):
    tasks = make_tasks(tokenizer, kind, 1500, 3, seed=7)
    assert tasks == make_tasks(tokenizer, kind, 1500, 3, seed=7)
    assert tasks != make_tasks(tokenizer, kind, 1500, 3, seed=8)
    assert len({task.document for task in tasks}) == 3
    for task in tasks:
        for answer in task.answers:  # a chain variable is assigned once (and read once by the next)
            needle = f"VAR {answer} =" if kind == "variable_tracking" else answer
            assert task.document.count(needle) == 1, (answer, kind)
        for distractor in task.distractors:
            assert distractor not in task.answers and distractor in task.document
        tokens = len(tokenizer(task.document, add_special_tokens=False)["input_ids"])
        assert 1000 < tokens <= 1500
        assert task.is_correct(" and ".join(task.answers))
        assert not task.is_correct("I do not know")


def test_depths_spread_over_the_document(tokenizer):
    tasks = make_tasks(tokenizer, "single_needle", 1200, 3)
    positions = [task.document.index(task.answers[0]) / len(task.document) for task in tasks]
    assert positions[0] < 0.2 and 0.35 < positions[1] < 0.65 and positions[2] > 0.8


def test_question_first_keeps_the_question_out_of_the_window(tokenizer):
    (task,) = make_tasks(tokenizer, "question_first", 1000, 1)
    assert task.document.startswith("Question: What is the secret pass code?")
    assert "pass code" not in task.question


def test_multi_value_needs_every_value(tokenizer):
    (task,) = make_tasks(tokenizer, "multi_value", 1000, 1)
    assert len(task.answers) == 3
    assert not task.is_correct(task.answers[0]) and task.is_correct(" ".join(task.answers))


def outcome(method, budget, sample, correct, task="single_needle", length=1024):
    return Outcome(task, length, sample, 0.5, length, method, budget, correct, "", "12345")


def test_accuracy_and_retention_compare_with_full_on_the_same_samples():
    outcomes = [outcome("full", None, 0, True), outcome("full", None, 1, True), outcome("full", None, 2, False),
                outcome("snapkv", 256, 0, True), outcome("snapkv", 256, 1, False), outcome("snapkv", 256, 2, True)]
    cells = {(c.method, c.budget): c for c in summarize(outcomes)}
    assert cells[("full", None)].accuracy == pytest.approx(2 / 3)
    assert cells[("snapkv", 256)].accuracy == pytest.approx(2 / 3)
    assert cells[("snapkv", 256)].retention == pytest.approx(2 / 2)
    longer = [outcome("snapkv", 256, 0, False, length=2048), outcome("full", None, 0, True, length=2048)]
    pooled = {(c.method, c.budget): c for c in overall(summarize(outcomes + longer))}
    assert pooled[("snapkv", 256)].total == 4 and pooled[("snapkv", 256)].retention == pytest.approx(2 / 3)


def test_accuracy_benchmark_smoke_run(tiny_model_path, tmp_path):
    markdown, png = tmp_path / "accuracy.md", tmp_path / "accuracy.png"
    result = CliRunner().invoke(app, ["bench", "accuracy", "--model", tiny_model_path, "--lengths", "300",
                                      "--budgets", "64,128", "--methods", "full,snapkv,h2o", "--samples", "2",
                                      "--tasks", "single_needle,question_first", "--json", "--markdown", str(markdown),
                                      "--png", str(png)])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["kind"] == "accuracy" and len(report["outcomes"]) == 2 * 2 * (1 + 2 * 2)
    assert {row["method"] for row in report["overall"]} == {"full", "snapkv", "h2o"}
    assert "| task | method | budget |" in markdown.read_text()
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "Accuracy" in result.stderr


def test_speed_benchmark_smoke_run(tiny_model_path):
    result = CliRunner().invoke(app, ["bench", "speed", "--model", tiny_model_path, "--lengths", "200",
                                      "--budgets", "64,1000", "--new-tokens", "4", "--json"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [(row["method"], row["budget"]) for row in rows] == [
        ("weights-only", None), ("transformers", None), ("full", None), ("snapkv", 64)]
    by_method = {row["method"]: row for row in rows}
    assert by_method["snapkv"]["kv_bytes"] * 200 == pytest.approx(by_method["full"]["kv_bytes"] * 64)
    assert all(row["decode_tokens_per_s"] > 0 for row in rows)


def test_bench_rejects_bad_lists(tiny_model_path):
    result = CliRunner().invoke(app, ["bench", "accuracy", "--methods", "snapkv,magic"])
    assert result.exit_code == 1 and result.stderr.startswith("Error: unknown method magic")
