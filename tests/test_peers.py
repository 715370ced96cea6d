"""The kvpress baseline is what its label says: kvpress alone, its SnapKVPress, at the budget it is compared at."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "docs" / "peers" / "kvpress_runner.py"


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
