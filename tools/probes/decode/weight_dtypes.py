"""``weight-dtypes``: the default model's weights in float32, bfloat16 and int8 on a CPU: prefill and decode speed,
load time and peak memory of ``snapkv ask``, side by side in one run.

    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.probes.decode weight-dtypes --rounds 3 --threads 1 \
        --out docs/results/weight_dtype.json

Every measurement is a fresh ``snapkv ask --json`` process (its report gives prefill_s, decode tok/s, load_s and peak
RSS); the variants take turns round after round, so a busy machine slows them alike, and each round's ratios to
float32 are taken within the round. The load variants time :func:`snapkv_cli.models.loader.load_model` alone, also
in fresh processes: ``bfloat16-at-load`` converts the float32 directory at every load (what a bfloat16 run did
before the bfloat16 copy was saved once), ``bfloat16`` reads that copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tools.docs import prose
from tools.docs.quickstart_report import DOCUMENT, QUESTION
from tools.probes.decode import common

ASK_VARIANTS = {"float32": ["--dtype", "float32"], "bfloat16": ["--dtype", "bfloat16"],
                "int8": ["--dtype", "bfloat16", "--quantize", "int8"],
                "float32-int8": ["--dtype", "float32", "--quantize", "int8"]}
LOAD_VARIANTS = {"float32": ("float32", None, True), "bfloat16": ("bfloat16", None, True),
                 "bfloat16-at-load": ("bfloat16", None, False), "int8": ("bfloat16", "int8", True)}

LOAD_CHILD = """
import json, sys, time
from snapkv_cli.models import conversion, loader
dtype, quantize, copy = sys.argv[1], sys.argv[2] or None, sys.argv[3] == "1"
if not copy:
    conversion.dtype_copy = lambda source, dtype, progress=None: source
loaded = loader.load_model(None, device="cpu", dtype=dtype, quantize=quantize)
print(json.dumps({"load_s": loaded.load_seconds, "dtype": str(loaded.dtype), "source": loaded.source,
                  "quantization": loaded.quantization}))
"""


def environment(threads: int) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def ask(args, variant: str) -> dict:
    command = [sys.executable, "-m", "snapkv_cli", "ask", args.doc, args.question, "--json", "--quiet",
               "--max-new-tokens", str(args.max_new_tokens), *ASK_VARIANTS[variant]]
    done = subprocess.run(command, capture_output=True, text=True, env=environment(args.threads), check=True)
    report = json.loads(done.stdout)
    timings = report["timings"]
    return {"prompt_tokens": report["prompt_tokens"], "prefill_s": timings["prefill_s"],
            "prefill_tokens_per_s": round(report["prompt_tokens"] / timings["prefill_s"], 1),
            "decode_tokens_per_s": timings["decode_tokens_per_s"], "generated_tokens": report["generated_tokens"],
            "load_s": timings["load_s"], "peak_rss_mb": round(report["memory"]["peak_rss_bytes"] / 1e6),
            "dtype": report["dtype"], "dtype_reason": report["dtype_reason"],
            "quantization": report["quantization"], "answer": report["answer"]}


def load(args, variant: str) -> dict:
    dtype, quantize, copy = LOAD_VARIANTS[variant]
    command = [sys.executable, "-c", LOAD_CHILD, dtype, quantize or "", "1" if copy else "0"]
    done = subprocess.run(command, capture_output=True, text=True, env=environment(args.threads), check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def arguments(parser) -> None:
    parser.add_argument("--doc", default=DOCUMENT)
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    common.output_arguments(parser)


def run(args) -> None:
    started = common.start(args)
    for variant in ASK_VARIANTS:  # the first use of a dtype may save its copy: not timed
        ask(args, variant)
    rounds = []
    for number in range(args.rounds):
        runs = {variant: ask(args, variant) for variant in ASK_VARIANTS}
        loads = {variant: load(args, variant) for variant in LOAD_VARIANTS}
        rounds.append({"ask": runs, "load": loads})
        print(f"round {number + 1}: " + "; ".join(
            f"{name} prefill {run['prefill_tokens_per_s']} tok/s, decode {run['decode_tokens_per_s']} tok/s, "
            f"rss {run['peak_rss_mb']} MB" for name, run in runs.items()), flush=True)
        print("  load_s: " + ", ".join(f"{name} {value['load_s']:.3f}" for name, value in loads.items()), flush=True)
    summary = {}
    for variant in ASK_VARIANTS:
        runs = [one["ask"][variant] for one in rounds]
        base = [one["ask"]["float32"] for one in rounds]
        summary[variant] = {
            key: common.min_median_max([run[key] for run in runs])
            for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "load_s", "peak_rss_mb")}
        summary[variant]["prefill_vs_float32"] = common.min_median_max(
            [round(run["prefill_tokens_per_s"] / ref["prefill_tokens_per_s"], 2) for run, ref in zip(runs, base)])
        summary[variant]["decode_vs_float32"] = common.min_median_max(
            [round(run["decode_tokens_per_s"] / ref["decode_tokens_per_s"], 2) for run, ref in zip(runs, base)])
        summary[variant]["answers"] = sorted({run["answer"] for run in runs})
    loads = {variant: common.min_median_max([one["load"][variant]["load_s"] for one in rounds])
             for variant in LOAD_VARIANTS}
    print(json.dumps({"ask": summary, "load_s": loads}, indent=1))
    common.write(args, started, "weight_dtype", rounds=rounds, summary=summary, load_s=loads)


# -- the docs' tables and facts from its JSON (tools.docs.tables) ---------------------------------------------------

def weight_dtype_table(path: str) -> str:
    """Each weight variant's prefill and decode speed, their ratios to float32
    within each round, peak RSS and load time, as min / median / max over the rounds."""
    report = prose.load(path)
    labels = {"float32": "float32", "bfloat16": "bfloat16", "int8": "bfloat16 + int8", "float32-int8": "float32 + int8"}

    def spread(row: dict, key: str, digits: int) -> str:
        return " / ".join(f"{row[key][part]:.{digits}f}" for part in ("min", "median", "max"))

    rows = [[labels.get(variant, variant), spread(row, "prefill_tokens_per_s", 0), spread(row, "prefill_vs_float32", 2),
             spread(row, "decode_tokens_per_s", 1), spread(row, "decode_vs_float32", 2), spread(row, "peak_rss_mb", 0),
             spread(row, "load_s", 2)]
            for variant, row in report["summary"].items()]
    return prose.table((["weights", "prefill tok/s", "prefill vs float32", "decode tok/s", "decode vs float32",
                         "peak RSS MB", "load_s"], rows))


TABLES = {"weight-dtype-table": weight_dtype_table}
