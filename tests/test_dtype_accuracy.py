"""The dtype comparison pairs the same prompts and counts what the faster dtype keeps of float32's right answers."""

from __future__ import annotations

import pytest

from tools.bench import dtype_accuracy


def _outcome(sample: int, correct: bool, answer: str, *, method: str = "snapkv", budget: int | None = 1024,
             tokens: int = 2000) -> dict:
    return {"task": "single_needle", "length": 2048, "sample": sample, "seed": f"test/single_needle/2048/{sample}",
            "prompt_tokens": tokens, "method": method, "budget": budget, "correct": correct, "answer": answer}


def test_kept_lost_and_gained_are_counted_against_the_reference():
    reference = {"outcomes": [_outcome(0, True, "a"), _outcome(1, True, "b"), _outcome(2, False, "c"),
                              _outcome(3, True, "d", method="full", budget=None)]}
    candidate = {"outcomes": [_outcome(0, True, "a"), _outcome(1, False, "x"), _outcome(2, True, "y"),
                              _outcome(3, True, "d", method="full", budget=None)]}
    rows = dtype_accuracy.pair_accuracy(reference, candidate)
    assert rows["snapkv 1024"] == {"pairs": 3, "reference_correct": 2, "kept": 1, "lost": 1, "gained": 1,
                                   "same_answer": 1, "retention": 0.5,
                                   "retention_interval": rows["snapkv 1024"]["retention_interval"]}
    assert rows["full"]["kept"] == 1 and rows["full"]["same_answer"] == 1
    total = dtype_accuracy.pooled(rows)
    assert (total["kept"], total["reference_correct"], total["lost"], total["gained"]) == (2, 3, 1, 1)
    low, high = total["retention_interval"]
    assert low < 2 / 3 < high


def test_a_run_on_other_prompts_is_refused():
    reference = {"outcomes": [_outcome(0, True, "a")]}
    candidate = {"outcomes": [_outcome(0, True, "a", tokens=1999)]}
    with pytest.raises(ValueError, match="not the same prompt"):
        dtype_accuracy.pair_accuracy(reference, candidate)


def test_a_lost_needle_cell_is_named():
    def cell(depth: float, exact: bool) -> dict:
        return {"length": 1024, "depth": depth, "method": "full", "budget": None, "prompt_tokens": 900,
                "exact": exact}

    rows = dtype_accuracy.pair_niah({"outcomes": [cell(0.0, True), cell(50.0, True), cell(100.0, False)]},
                                    {"outcomes": [cell(0.0, True), cell(50.0, False), cell(100.0, True)]})
    assert rows["full"]["lost_cells"] == [[1024, 50.0]]
    assert (rows["full"]["kept"], rows["full"]["gained"]) == (1, 1)
