"""The kvpress baseline is what its label says: kvpress alone, its SnapKVPress, at the budget it is compared at."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "benchmarks" / "peers" / "kvpress_runner.py"




def test_the_runner_refuses_to_run_where_snapkv_cli_is_importable():
    # this interpreter is the project's: snapkv_cli is importable, so the runner must not start
    process = subprocess.run([sys.executable, str(RUNNER), "any-model-dir"], input="", capture_output=True,
                             text=True, timeout=60, cwd=str(ROOT))
    assert process.returncode != 0
    assert "refusing to run: snapkv_cli is importable" in process.stderr


@pytest.mark.parametrize("tokens", [100, 877, 2048, 4011, 8100])
def test_a_token_budget_becomes_the_ratio_that_keeps_exactly_it(tokens):
    from benchmarks.peers import kvpress_runner as runner  # functions only: kvpress runs in main()
    for kept in range(40, tokens + 50, 7):
        ratio = runner.compression_ratio(tokens, kept)
        assert 0 <= ratio < 1
        assert runner.kept_by_kvpress(tokens, ratio) == min(kept, tokens)


def test_the_peers_accuracy_prompts_are_the_bench_samples_scored_by_its_scorer(tokenizer, template):
    from benchmarks.peers import peers_bench as bench
    from snapkv_cli.bench.tasks import NEW_TOKENS, make_tasks
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
