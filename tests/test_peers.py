"""The kvpress baseline is what its label says: kvpress alone, its SnapKVPress, at the budget it is compared at."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "docs" / "peers" / "kvpress_runner.py"
RECORDED = ROOT / "docs" / "results" / "peers" / "peers.json"


def _runner_module():
    spec = importlib.util.spec_from_file_location("kvpress_runner", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines functions only: torch and kvpress are imported in main()
    return module


def test_the_runner_refuses_to_run_where_snapkv_cli_is_importable():
    # this interpreter is the project's: snapkv_cli is importable, so the runner must not start
    process = subprocess.run([sys.executable, str(RUNNER), "any-model-dir"], input="", capture_output=True,
                             text=True, timeout=60, cwd=str(ROOT))
    assert process.returncode != 0
    assert "refusing to run: snapkv_cli is importable" in process.stderr


@pytest.mark.parametrize("tokens", [100, 877, 2048, 4011, 8100])
def test_a_token_budget_becomes_the_ratio_that_keeps_exactly_it(tokens):
    runner = _runner_module()
    for kept in range(40, tokens + 50, 7):
        ratio = runner.compression_ratio(tokens, kept)
        assert 0 <= ratio < 1
        assert runner.kept_by_kvpress(tokens, ratio) == min(kept, tokens)


@pytest.fixture(scope="module")
def recorded():
    return json.loads(RECORDED.read_text(encoding="utf-8"))


def test_the_recorded_kvpress_rows_ran_kvpress_snapkvpress_apart_from_snapkv_cli(recorded):
    environment = recorded["kvpress_environment"]
    assert environment["kvpress"] == "0.5.5"
    major, minor = (int(part) for part in environment["transformers"].split(".")[:2])
    assert (major, minor) < (5, 3)  # kvpress's own requirement, unlike the project's transformers
    assert recorded["snapkv_cli"]["transformers"] != environment["transformers"]
    kvpress_rows = [row for row in recorded["rows"] if row["label"].startswith("kvpress")]
    assert kvpress_rows and {row["label"] for row in kvpress_rows} == {"kvpress-default", "kvpress-ours"}
    for row in kvpress_rows:
        press = row["press"]
        assert press["class"] == "SnapKVPress" and press["module"] == "kvpress.presses.snapkv_press"
        expected = (64, 5) if row["label"] == "kvpress-default" else (32, 15)  # its defaults; our window, kernel
        assert (press["window_size"], press["kernel_size"]) == expected
        assert row["kept_tokens"] == min(row["budget"], row["prompt_tokens"])  # every layer: the same budget
    ours = [row for row in recorded["rows"] if row["label"].startswith("snapkv-cli")]
    assert ours and all(row["press"] is None for row in ours)
    assert {row["label"] for row in recorded["rows"]} >= {"snapkv-cli full", "snapkv-cli", "transformers (kvpress venv)"}


def test_both_sides_saw_the_same_prompts_and_budgets(recorded):
    cells: dict[tuple, set] = {}
    for row in recorded["rows"]:
        cells.setdefault((row["prompt"], row["prompt_tokens"]), set()).add((row["label"], row["budget"]))
    labels = None
    for key, seen in cells.items():
        labels = labels or seen
        assert seen == labels, key  # every prompt ran every system at every budget
    for row in recorded["rows"]:
        if row["label"] == "snapkv-cli" and row["budget"] < row["prompt_tokens"]:
            assert row["kept_tokens"] == row["budget"]
