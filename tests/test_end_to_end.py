"""The real default model (SmolLM2-135M-Instruct) on short documents: fetched and converted on first use."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from snapkv_cli.cli import app

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_model():
    from snapkv_cli.models.loader import load_model

    return load_model(device="cpu")


def run(*args):
    return CliRunner().invoke(app, ["ask", *args])


def test_answers_from_the_example_pdf_report():
    result = run("examples/annual_report.pdf", "Who is the chief executive of Northwind Harbor Logistics?")
    assert result.exit_code == 0, result.stderr
    assert "Marta Lindqvist" in result.stdout
    assert "snapkv" in result.stderr and "KV cache" in result.stderr
    assert "KV cache" not in result.stdout


def test_answers_from_the_example_text_with_json_report():
    result = run("examples/field_notes.txt", "What is the station's coastguard code?", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert "K-4417" in report["answer"]
    assert report["model"] == "smollm2-135m-instruct"
    assert report["cache"]["tokens_before"] == report["prompt_tokens"] > 1024
    assert report["cache"]["tokens_after"] == 1024
    assert len(report["layers"]) == 30 and all(row["kept_tokens_max"] == 1024 for row in report["layers"])


@pytest.mark.parametrize("seed, depth", [(0, 0.1), (3, 0.6), (5, 0.9)])
def test_needle_in_real_prose_survives_snapkv_at_budget_1024(default_model, seed, depth):
    from snapkv_cli.answering.documents import Document, Page
    from snapkv_cli.answering.prompting import load_template
    from snapkv_cli.answering.session import ask
    from snapkv_cli.bench.tasks import PromptShape, single_needle, task_seed
    from snapkv_cli.defaults import CLI_DEFAULTS
    from snapkv_cli.engine import CompressionSettings
    from snapkv_cli.generation import GenerationOptions

    seed_text = task_seed("test", "single_needle", 2300, seed)
    shape = PromptShape(default_model.tokenizer, load_template(), 2300)
    task = single_needle(shape, depth, random.Random(seed_text), seed_text, "test")
    document = Document(source="needle", kind="text", pages=(Page(1, task.document),))
    for method in ("full", "snapkv"):
        settings = CompressionSettings(method=method, **CLI_DEFAULTS)
        answer = ask(default_model, document, task.question, settings, load_template(),
                     generation=GenerationOptions(max_new_tokens=16))
        assert answer.prompt.length >= 2000
        assert task.is_correct(answer.result.answer), (method, answer.result.answer, task.answer)
        if method == "snapkv":
            assert answer.report.to_json()["cache"]["tokens_after"] == 1024


def test_needle_is_lost_when_the_cache_drops_it(default_model):
    """The control: StreamingLLM keeps only the start and the end, so a needle at 10% depth is gone."""
    from snapkv_cli.answering.documents import Document, Page
    from snapkv_cli.answering.prompting import load_template
    from snapkv_cli.answering.session import ask
    from snapkv_cli.bench.tasks import PromptShape, single_needle, task_seed
    from snapkv_cli.engine import CompressionSettings
    from snapkv_cli.generation import GenerationOptions

    seed_text = task_seed("test", "single_needle", 2300, 0)
    shape = PromptShape(default_model.tokenizer, load_template(), 2300)
    task = single_needle(shape, 0.1, random.Random(seed_text), seed_text, "test")
    document = Document(source="needle", kind="text", pages=(Page(1, task.document),))
    settings = CompressionSettings(method="streamingllm", window_size=32, max_capacity_prompt=1024)
    answer = ask(default_model, document, task.question, settings, load_template(),
                     generation=GenerationOptions(max_new_tokens=16))
    assert not task.is_correct(answer.result.answer)
