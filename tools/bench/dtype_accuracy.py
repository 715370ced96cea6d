"""What a faster weight dtype keeps of float32's right answers, on the same prompts, paired sample by sample.

Both runs are the bench's own commands, the same seed, split, tasks, methods and budgets, only ``--dtype`` differs::

    for dtype in float32 bfloat16; do
      OMP_NUM_THREADS=1 snapkv bench accuracy --methods full,snapkv,defensivekv+uniformheads+causalpool \
        --budgets 1024 --lengths 2048,4096 --samples 3 --split test --seed 0 --dtype $dtype --json \
        > docs/results/dtype/accuracy_$dtype.json
      OMP_NUM_THREADS=1 snapkv bench niah --lengths 1024,2048,4096 \
        --methods full,snapkv,defensivekv+uniformheads+causalpool --budgets 1024 --dtype $dtype --json \
        > docs/results/dtype/niah_$dtype.json
    done
    .venv/bin/python -m tools.bench.dtype_accuracy docs/results/dtype --reference float32 --candidate bfloat16

A folder's ``docqa_<dtype>.json`` runs (``--tasks docqa``: questions about real documents) are pooled with its
``accuracy_<dtype>.json`` runs (and counted apart too). Per method label (the full cache included): of the prompts
float32 answers right, how many the candidate dtype
also answers right (retention, with a Wilson 95% interval), how many it gains and loses, and how many answers are
the same text; per needle cell, whether float32's exact cells are all kept. A pair is made only where both runs
read the same prompt (same sample seed and prompt length); a run whose prompts differ is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from snapkv_cli.bench.retention import wilson_interval
from tools.docs import prose


def _label(outcome: dict) -> str:
    return outcome["method"] if outcome["budget"] is None else f"{outcome['method']} {outcome['budget']}"


def _paired(reference: dict, candidate: dict, key: tuple[str, ...], prompt: tuple[str, ...]):
    """(reference outcome, candidate outcome) for every cell both ran; a cell whose ``prompt`` fields differ means
    the runs read other prompts, and is refused."""
    theirs = {tuple(outcome[k] for k in key): outcome for outcome in candidate["outcomes"]}
    for outcome in reference["outcomes"]:
        other = theirs.get(tuple(outcome[k] for k in key))
        if other is None:
            continue
        if any(other[k] != outcome[k] for k in prompt):
            raise ValueError(f"not the same prompt: {[outcome[k] for k in key + prompt]} against "
                             f"{[other[k] for k in key + prompt]}")
        yield outcome, other


def pair_accuracy(reference: dict, candidate: dict) -> dict[str, dict]:
    """Per label: float32-right prompts kept, lost and gained by the candidate, and identical answers."""
    rows: dict[str, dict] = {}
    for outcome, other in _paired(reference, candidate, ("task", "length", "sample", "method", "budget"),
                                  ("seed", "prompt_tokens")):
        row = rows.setdefault(_label(outcome), {"pairs": 0, "reference_correct": 0, "kept": 0, "lost": 0,
                                                "gained": 0, "same_answer": 0})
        row["pairs"] += 1
        row["same_answer"] += outcome["answer"] == other["answer"]
        if outcome["correct"]:
            row["reference_correct"] += 1
            row["kept" if other["correct"] else "lost"] += 1
        elif other["correct"]:
            row["gained"] += 1
    for row in rows.values():
        row["retention"] = row["kept"] / row["reference_correct"] if row["reference_correct"] else None
        row["retention_interval"] = wilson_interval(row["kept"], row["reference_correct"])
    return rows


def pair_niah(reference: dict, candidate: dict) -> dict[str, dict]:
    """Per label: float32's exact needle cells, and those the candidate keeps, loses and gains."""
    rows: dict[str, dict] = {}
    for outcome, other in _paired(reference, candidate, ("length", "depth", "method", "budget"), ("prompt_tokens",)):
        row = rows.setdefault(_label(outcome), {"cells": 0, "reference_exact": 0, "kept": 0, "lost": 0,
                                                "gained": 0, "lost_cells": []})
        row["cells"] += 1
        if outcome["exact"]:
            row["reference_exact"] += 1
            if other["exact"]:
                row["kept"] += 1
            else:
                row["lost"] += 1
                row["lost_cells"].append([outcome["length"], outcome["depth"]])
        elif other["exact"]:
            row["gained"] += 1
    return rows


def pooled(rows: dict[str, dict]) -> dict:
    kept = sum(row["kept"] for row in rows.values())
    correct = sum(row["reference_correct"] for row in rows.values())
    return {"kept": kept, "reference_correct": correct, "retention": kept / correct if correct else None,
            "retention_interval": wilson_interval(kept, correct),
            "lost": sum(row["lost"] for row in rows.values()), "gained": sum(row["gained"] for row in rows.values())}


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() and path.stat().st_size else None


def merged(reports: list[dict | None]) -> dict | None:
    """Several runs' outcomes as one (the first run's outcome wins where two ran the same cell)."""
    key = ("length", "depth", "method", "budget")
    seen: dict = {}
    for report in filter(None, reports):
        for outcome in report["outcomes"]:
            seen.setdefault(tuple(outcome[k] for k in key), outcome)
    return {"outcomes": list(seen.values())} if seen else None


def summarize(folder: Path, reference: str, candidate: str, niah_reference: list[Path] = ()) -> dict:
    """``niah_reference``: committed needle runs in the reference dtype to pair with, where the folder has none."""
    def load(kind: str, dtype: str) -> dict | None:
        return _read(folder / f"{kind}_{dtype}.json")

    summary: dict = {"reference": reference, "candidate": candidate}
    accuracy = load("accuracy", reference), load("accuracy", candidate)
    docqa = load("docqa", reference), load("docqa", candidate)
    if all(docqa):  # the questions about real documents, a run of their own, pooled with the rest
        summary["docqa"] = pooled(pair_accuracy(*docqa))
        accuracy = tuple({"outcomes": [*(run or {}).get("outcomes", []), *questions["outcomes"]]}
                         for run, questions in zip(accuracy, docqa))
    if all(accuracy):
        rows = pair_accuracy(*accuracy)
        summary["accuracy"] = {"by_label": rows, "pooled": pooled(rows)}
    niah = load("niah", reference) or merged([_read(path) for path in niah_reference]), load("niah", candidate)
    if all(niah):
        rows = pair_niah(*niah)
        summary["niah"] = {"by_label": rows, "lost_cells": sum(row["lost"] for row in rows.values())}
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--reference", default="float32")
    parser.add_argument("--candidate", default="bfloat16")
    parser.add_argument("--niah-reference", type=Path, nargs="*", default=[],
                        help="committed needle runs in the reference dtype (when the folder has no niah_<reference>)")
    args = parser.parse_args()
    print(json.dumps(summarize(args.folder, args.reference, args.candidate, args.niah_reference), indent=1))
    return 0


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def dtype_retention(folder: str, *niah_reference: str, candidate: str = "bfloat16",
                    header: str = "float32's right answers kept in bfloat16") -> str:
    """What bfloat16 weights (or another ``candidate`` run of the folder) keep of float32's right answers (bench test
    split) and exact needle cells, paired; a candidate without a needle run says so in its needle column."""
    summary = summarize(prose.DOCS / folder, "float32", candidate, [prose.DOCS / path for path in niah_reference])
    niah_rows = summary["niah"]["by_label"] if "niah" in summary else None
    rows = []
    for label, row in summary["accuracy"]["by_label"].items():
        niah = (niah_rows or {}).get(label, {})
        rows.append([label, f"{row['kept']} / {row['reference_correct']}", prose.interval(row["retention_interval"]),
                     f"+{row['gained']} -{row['lost']}", f"{row['same_answer']} / {row['pairs']}",
                     "not run" if niah_rows is None else
                     f"{niah.get('kept', '-')} / {niah.get('reference_exact', '-')}"])
    total = summary["accuracy"]["pooled"]
    if "docqa" in summary:
        questions = summary["docqa"]
        rows.append(["of which questions about real documents (docqa)",
                     f"{questions['kept']} / {questions['reference_correct']}",
                     prose.interval(questions["retention_interval"]),
                     f"+{questions['gained']} -{questions['lost']}", "", ""])
    rows.append(["all", f"{total['kept']} / {total['reference_correct']} ({100 * total['retention']:.1f}%)",
                 prose.interval(total["retention_interval"]), f"+{total['gained']} -{total['lost']}", "",
                 "not run" if niah_rows is None else f"{summary['niah']['lost_cells']} lost"])
    return prose.table((["method", header, "interval", "gained / lost", "identical answers", "exact needle cells kept"],
                        rows))


def decode_weights_retention(folder: str, *niah_reference: str) -> str:
    """What bfloat16 decoding steps (``--decode-weights bfloat16``, the folder's ``decode-bf16`` runs) keep of
    float32's right answers and exact needle cells, paired as :func:`dtype_retention`."""
    return dtype_retention(folder, *niah_reference, candidate="decode-bf16",
                           header="float32's right answers kept with bfloat16 decoding steps")


def decode_int4_retention(folder: str, *niah_reference: str) -> str:
    """What int4 decoding steps (``--decode-weights int4``, the folder's ``decode-int4`` runs) keep of float32's right
    answers and exact needle cells, paired as :func:`dtype_retention`."""
    return dtype_retention(folder, *niah_reference, candidate="decode-int4",
                           header="float32's right answers kept with int4 decoding steps")


def decode_weights_retention_facts(folder: str, candidate: str = "decode-bf16") -> dict[str, str]:
    """The ``candidate`` decoding steps' pooled retention of float32's right answers (the folder's ``decode-bf16``
    runs unless named): ``kept`` ("46 of 48"), ``share``, ``lost``, ``gained``, and how many answers were the same
    text (``identical``)."""
    summary = summarize(prose.DOCS / folder, "float32", candidate)
    total, rows = summary["accuracy"]["pooled"], summary["accuracy"]["by_label"].values()
    return {"kept": f"{total['kept']} of {total['reference_correct']}", "share": f"{100 * total['retention']:.1f}%",
            "lost": str(total["lost"]), "gained": str(total["gained"]),
            "identical": f"{sum(row['same_answer'] for row in rows)} of {sum(row['pairs'] for row in rows)}"}


def decode_int4_retention_facts(folder: str) -> dict[str, str]:
    """:func:`decode_weights_retention_facts` of the folder's ``decode-int4`` runs."""
    return decode_weights_retention_facts(folder, "decode-int4")


TABLES = {
    "dtype-retention": dtype_retention,
    "decode-weights-retention": decode_weights_retention,
    "decode-int4-retention": decode_int4_retention,
}
FACTS = {
    "decode-weights-retention": decode_weights_retention_facts,
    "decode-int4-retention": decode_int4_retention_facts,
}


if __name__ == "__main__":
    sys.exit(main())
