"""The peers' rows are what their labels say: kvpress alone, its SnapKVPress (or the press nearest to the CLI's
default) at the budget it is compared at, and snapkv-cli's SnapKV or default method."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "tools" / "bench" / "peers" / "kvpress_runner.py"
KVPRESS_VENV = ROOT / ".venv-kvpress"


def test_the_runner_refuses_to_run_where_snapkv_cli_is_importable():
    # this interpreter is the project's: snapkv_cli is importable, so the runner must not start
    process = subprocess.run([sys.executable, str(RUNNER), "any-model-dir"], input="", capture_output=True,
                             text=True, timeout=60, cwd=str(ROOT))
    assert process.returncode != 0
    assert "refusing to run: snapkv_cli is importable" in process.stderr


@pytest.mark.parametrize("tokens", [100, 877, 2048, 4011, 8100])
def test_a_token_budget_becomes_the_ratio_that_keeps_exactly_it(tokens):
    from tools.bench.peers import kvpress_runner as runner  # functions only: kvpress runs in main()
    for kept in range(40, tokens + 50, 7):
        ratio = runner.compression_ratio(tokens, kept)
        assert 0 <= ratio < 1
        assert runner.kept_by_kvpress(tokens, ratio) == min(kept, tokens)


def test_the_peers_accuracy_prompts_are_the_bench_samples_scored_by_its_scorer(tokenizer, template):
    from snapkv_cli.bench.tasks import NEW_TOKENS, make_tasks
    from tools.bench.peers import peers_bench as bench
    args = argparse.Namespace(niah_lengths="", niah_depths="0", accuracy_lengths="1500",
                              accuracy_tasks="single_needle,multi_key", accuracy_samples=2, accuracy_new_tokens=None)
    prompts = bench.build_prompts(tokenizer, args, context_tokens=4096)
    assert [p["id"] for p in prompts] == ["single_needle-1500-0", "single_needle-1500-1", "multi_key-1500-0",
                                          "multi_key-1500-1"]
    for kind in ("single_needle", "multi_key"):
        expected = make_tasks(tokenizer, kind, 1500, 2, template, max_prompt_tokens=4096 - NEW_TOKENS[kind])
        mine = [p for p in prompts if p["task"] == kind]
        assert [p["task_object"] for p in mine] == expected  # the test split's samples, as bench accuracy draws them
        assert {p["max_new_tokens"] for p in mine} == {NEW_TOKENS[kind]}
    needle = prompts[0]["task_object"]
    (code,) = needle.answers
    assert bench.score(prompts[0], f"The code is {code}.")["correct"]
    assert not bench.score(prompts[0], f"1{code}9")["correct"]  # a padded number is not the code
    keys = prompts[2]["task_object"]
    listed = ", ".join([*keys.answers, *keys.distractors])
    assert not bench.score(prompts[2], listed)["correct"]  # every code listed, distractors included: wrong
    assert keys.distractors and bench.score(prompts[2], ", ".join(keys.answers))["correct"]


def test_the_snapkv_rows_run_snapkv_and_the_default_row_the_clis_default_method():
    from snapkv_cli import defaults
    from tools.bench.peers import kvpress_runner as runner
    from tools.bench.peers import peers_bench as bench

    for key in ("snapkv", "snapkv-avgpool"):
        method, settings = bench.our_settings(key, 256)
        assert method == settings.method == "snapkv"  # whatever the CLI's default is
        # kvpress-ours' window and kernel; the committed run's pooling window and GQA aggregation
        assert (settings.window_size, settings.kernel_size) == (runner.OUR_WINDOW, runner.OUR_KERNEL)
        assert (settings.pooling_window, settings.gqa_aggregation, settings.max_capacity_prompt) == ("centered", "mean",
                                                                                                     256)
    assert bench.our_settings("snapkv", 256)[1].pooling == "maxpool"
    assert bench.our_settings("snapkv-avgpool", 256)[1].pooling == "avgpool"  # kvpress's only pooling
    _, default = bench.our_settings("default", 1024)
    assert default.method == defaults.METHOD
    for name, value in {**defaults.METHOD_SETTINGS, **defaults.CLI_DEFAULTS, "max_capacity_prompt": 1024}.items():
        assert getattr(default, name) == value, name
    assert runner.NEAREST_TO == defaults.METHOD  # kvpress-nearest stands in for the method the default row runs


def test_rows_are_chosen_by_key_and_older_reports_say_their_rows_ran_snapkv():
    from tools.bench.peers import peers_bench as bench

    assert bench.parse_rows("kvpress-nearest,default,full") == ("full", "default", "kvpress-nearest")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown rows snapkv-cli"):
        bench.parse_rows("full,snapkv-cli")
    rows = [{"label": "snapkv-cli", "budget": 256}, {"label": "snapkv-cli avgpool", "budget": 256},
            {"label": "snapkv-cli full", "budget": None}, {"label": "kvpress-ours", "budget": 256}]
    # schema 2 ran SnapKV under the tool's name (the default then); schema 3 names every row for what it runs
    assert [row["label"] for row in bench.rows_of({"schema_version": 2, "rows": rows})] == [
        "snapkv-cli snapkv", "snapkv-cli snapkv avgpool", "snapkv-cli full", "kvpress-ours"]
    assert bench.rows_of({"schema_version": 3, "rows": rows}) == rows


class _Recorded:
    """A stand-in press class that records how it was built."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def test_the_runner_builds_the_press_each_label_names():
    from types import SimpleNamespace

    from tools.bench.peers import kvpress_runner as runner

    kvpress = SimpleNamespace(SnapKVPress=type("SnapKVPress", (_Recorded,), {}),
                              CriticalKVPress=type("CriticalKVPress", (_Recorded,), {}))
    press, whole = runner.build_press("kvpress-default", kvpress)
    assert (type(press).__name__, press.args, press.kwargs, whole) == ("SnapKVPress", (), {}, False)
    press, whole = runner.build_press("kvpress-ours", kvpress)
    assert (type(press).__name__, press.kwargs, whole) == ("SnapKVPress", {"window_size": 32, "kernel_size": 15}, True)
    press, whole = runner.build_press("kvpress-nearest", kvpress)
    assert type(press).__name__ == "CriticalKVPress" and whole  # the question in the window, as snapkv-cli
    (inner,) = press.args
    assert (type(inner).__name__, inner.kwargs) == ("SnapKVPress", {"window_size": 32, "kernel_size": 15})
    with pytest.raises(ValueError, match="no press row"):
        runner.build_press("transformers", kvpress)


@pytest.mark.skipif(not (KVPRESS_VENV / "bin" / "python").exists(),
                    reason="kvpress's environment is not built here (bash tools/bench/peers/kvpress_venv.sh)")
def test_kvpress_runs_the_nearest_press_at_the_budget_and_records_it(tiny_model_path):
    """With kvpress itself: the runner's nearest press is CriticalKVPress around SnapKVPress at snapkv-cli's window
    and kernel, keeps exactly the budget in every layer and head, and the row records it."""
    import json

    from tools.bench.peers import peers_bench as bench

    kvpress = bench.start_kvpress(argparse.Namespace(kvpress_venv=str(KVPRESS_VENV)), tiny_model_path)
    ids = [(7 * i) % 200 + 3 for i in range(160)]
    request = {"id": "p", "input_ids": ids, "prefix_length": 150, "budgets": [64], "max_new_tokens": 2,
               "stop_ids": [], "labels": ["kvpress-nearest"]}
    reply, _ = kvpress.communicate(json.dumps(request) + "\n", timeout=300)
    assert kvpress.returncode == 0
    answer = json.loads(reply)
    assert not answer["snapkv_cli_loaded"]
    (row,) = answer["rows"]
    assert (row["label"], row["budget"], row["kept_min"], row["kept_max"]) == ("kvpress-nearest", 64, 64, 64)
    press = row["press"]
    assert (press["class"], press["module"]) == ("CriticalKVPress", "kvpress.presses.criticalkv_press")
    assert press["compressed_tokens"] == len(ids) and press["nearest_to"] == "defensivekv"
    inner = press["press"]
    assert (inner["class"], inner["window_size"], inner["kernel_size"]) == ("SnapKVPress", 32, 15)
    assert inner["compression_ratio"] == press["compression_ratio"] > 0  # the budget reaches the scoring press
