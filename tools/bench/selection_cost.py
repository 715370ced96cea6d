"""What choosing the kept positions costs, for every method, against the prefill it is part of.

    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.bench.selection_cost --rounds 3 \
        --out docs/results/selection_cost.json

Every measurement runs in a fresh process (threads and allocator start clean), and the processes take turns round
after round, so a busy machine slows them alike. One process per (prompt length, threads) loads the default model at
``--dtype`` and:

1. after a short warm-up, prefills ``length`` tokens of prose in one pass with the full cache, as ``snapkv ask
   --method full`` does, keeping each layer's attention inputs, keys and values as the cache receives them
   (references, no copies): the one-pass prefill without selection;
2. prefills the same tokens with the CLI's default method, as ``snapkv ask`` does: its real ``selection_s``;
3. for each method, runs on every captured layer the very code the cache times as ``selection_s`` inside a
   compressing prefill (``PendingLayer.absorb``, the window queries, then ``compress_layer``: the policy's
   ``Policy.select`` and the gathering of the kept keys and values), and sums it over the layers.

A method's share is its selection seconds over its one-pass prefill (the full cache's prefill without its own window
queries, plus the method's selection). Step 2 checks step 3 against a real run of the default method (the same kept
positions). H2O is left out by default: its attention sums over every prompt query cost a multiple of the prefill.

``--questions`` (on by default) measures questions on a shared document prefix, as ``snapkv ask -Q a -Q b``
runs it: per question, its prefill, its selection and its decoding, with the CLI's default method, and the one-pass
prefill of the whole prompt for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tools.docs import prose

LENGTHS = (2048, 4096, 8192)
THREADS = (1, 2)
BUDGET = 1024
QUESTIONS = ("What is the coastguard code of Skerrow Point Light?", "What is the name of the relief boat?",
             "Who is the skipper of the relief boat?")
QUESTION_LENGTH = 4096
QUESTION_TOKENS = 24


def method_labels() -> list[str]:
    """The CLI's default method as the bench labels it, then every compressing method but H2O (whose attention sums
    over every prompt query cost a multiple of the prefill: ``--methods h2o`` measures it)."""
    from snapkv_cli.bench.grid import default_label
    from snapkv_cli.engine.methods import METHODS

    return [default_label()] + [name for name, method in METHODS.items()
                        if method.compresses and not method.accumulates_attention]


def _load(dtype: str, threads: int):
    import torch

    torch.set_num_threads(threads)
    from snapkv_cli.generation.allocator import return_freed_memory_to_os

    return_freed_memory_to_os()  # what the snapkv command does at start-up
    from snapkv_cli.models.loader import load_model

    return load_model(None, device="cpu", dtype=dtype)


def capturing_prefill(model, ids: list[int], settings, capture: bool = False):
    """Prefill ``ids`` in one pass into a fresh cache with ``settings``, as ``snapkv ask`` does; with ``capture``,
    the cache also keeps what each layer's compression step receives (its chunk's attention inputs, its keys and
    values: references, no copies) in ``cache.captured``. Returns the cache and the prefill's seconds."""
    from snapkv_cli.engine import SnapKVCache
    from snapkv_cli.generation import prefill

    class CapturingCache(SnapKVCache):
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            chunk = self._chunks.get(layer_idx)
            keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
            self.captured.append((layer_idx, chunk, keys, values))
            return keys, values

    cache = (CapturingCache if capture else SnapKVCache)(settings=settings, config=model.config)
    cache.captured = []
    started = time.perf_counter()
    prefill(model, ids, cache)
    return cache, time.perf_counter() - started


def replay_selection(captured: list, settings, threads=None) -> tuple[float, list]:
    """Seconds of the code the cache times as ``selection_s`` (window queries, then ``compress_layer``), run with
    ``settings`` on every captured layer, and each layer's kept positions. ``threads``: the
    :class:`~snapkv_cli.engine.threads.SelectionThreads` the steps run under (default: a fresh one, as a cache's)."""
    import types

    from snapkv_cli.engine.compression import compress_layer
    from snapkv_cli.engine.pending import PendingLayer
    from snapkv_cli.engine.policies import POLICIES
    from snapkv_cli.engine.threads import SelectionThreads

    policy = POLICIES[settings.method](settings)
    threads = threads or SelectionThreads()
    seconds, kept = 0.0, []
    for layer_idx, chunk, keys, values in captured:
        started = time.perf_counter()
        with threads.step(keys.device, compresses=True):
            pending = PendingLayer()
            pending.absorb(chunk, keys, settings, policy.accumulates_attention)
            record, _ = compress_layer(policy, types.SimpleNamespace(), layer_idx, chunk.module, keys, values,
                                       pending, None)
        seconds += time.perf_counter() - started
        kept.append(record.kept_positions)
    return seconds, kept


def selection_child(length: int, threads: int, dtype: str, budget: int, methods: list[str]) -> dict:
    """One process: the full cache's prefill (captured), the default method's prefill, every method's selection."""
    import torch

    from snapkv_cli.bench.grid import MethodGrid
    from snapkv_cli.bench.speed import prose_ids
    from snapkv_cli.engine import prepare

    loaded = _load(dtype, threads)
    model = loaded.model
    prepare(model)
    ids = prose_ids(loaded.tokenizer, length)
    grid = MethodGrid()

    with torch.inference_mode():
        capturing_prefill(model, ids[:64], grid.settings("full", None))  # warm-up
        full, full_s = capturing_prefill(model, ids, grid.settings("full", None), capture=True)
        default, default_s = capturing_prefill(model, ids, grid.settings(methods[0], budget))
        assert all(chunk is not None and chunk.length == length for _, chunk, _, _ in full.captured), \
            "the default model prefills in one pass"
        selections, kept = {}, {}
        for method in methods:
            selections[method], kept[method] = replay_selection(full.captured, grid.settings(method, budget))
        real = [record.kept_positions for _, record in sorted(default.records.items())]
        same = all(torch.equal(a, b) for a, b in zip(real, kept[methods[0]], strict=True))
    return {"length": length, "threads": torch.get_num_threads(), "dtype": str(loaded.dtype).removeprefix("torch."),
            "model": loaded.name, "budget": budget, "full_prefill_s": round(full_s, 4),
            "full_selection_s": round(full.selection_seconds, 4), "default_prefill_s": round(default_s, 4),
            "default_selection_s": round(default.selection_seconds, 4), "default_replay_same_kept": same,
            "selection_s": {method: round(seconds, 4) for method, seconds in selections.items()}}


def questions_child(length: int, threads: int, dtype: str, budget: int, new_tokens: int) -> dict:
    """One process: questions on one document's shared prefix, as ``snapkv ask -Q a -Q b`` runs them."""
    import torch

    from snapkv_cli.answering.documents import Document, Page
    from snapkv_cli.answering.prompting import load_template
    from snapkv_cli.answering.session import DocumentSession
    from snapkv_cli.bench.grid import MethodGrid
    from snapkv_cli.generation import GenerationOptions

    from .multi_question_bench import build_document

    loaded = _load(dtype, threads)
    settings = MethodGrid().settings(method_labels()[0], budget)
    document = Document(source="notes.txt", kind="text", pages=(Page(1, build_document(loaded.tokenizer, length)),))
    options = GenerationOptions(max_new_tokens=new_tokens, stop_at_eos=False)
    template = load_template(None)
    one_pass = DocumentSession(loaded, document, settings, template, generation=options, share_prefix=False)
    one_pass.ask(QUESTIONS[0], generate=False)  # warm-up
    single = one_pass.ask(QUESTIONS[0], generate=False).report.timings
    session = DocumentSession(loaded, document, settings, template, generation=options)
    rows = []
    for question in QUESTIONS:
        answer = session.ask(question)
        timings = answer.report.timings
        rows.append({"question": question, "prompt_tokens": answer.report.prompt_tokens,
                     "prefix_tokens": answer.prompt.prefix_length, "prefix_s": timings.prefix_s,
                     "prefill_s": timings.prefill_s, "selection_s": timings.selection_s,
                     "decode_s": timings.decode_s, "wall_s": timings.wall_s})
    return {"length": length, "threads": torch.get_num_threads(), "dtype": str(loaded.dtype).removeprefix("torch."),
            "model": loaded.name, "budget": budget, "method": method_labels()[0],
            "one_pass_prefill_s": single.prefill_s, "one_pass_selection_s": single.selection_s,
            "questions": rows}


def _child(args: list[str], threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, "-m", "tools.bench.selection_cost", *args], env=env, capture_output=True,
                          text=True)
    if done.returncode:
        sys.exit(f"{' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def summarize(runs: list[dict], question_runs: list[dict]) -> dict:
    rows = []
    cells = sorted({(run["length"], run["threads"]) for run in runs})
    for length, threads in cells:
        group = [run for run in runs if (run["length"], run["threads"]) == (length, threads)]
        bare = [run["full_prefill_s"] - run["full_selection_s"] for run in group]
        for method in group[0]["selection_s"]:
            seconds = [run["selection_s"][method] for run in group]
            shares = [s / (b + s) for s, b in zip(seconds, bare)]
            rows.append({"method": method, "length": length, "threads": threads, "selection_s": spread(seconds),
                         "prefill_s": spread([b + s for s, b in zip(seconds, bare)]), "share": spread(shares)})
    checks = [{"length": run["length"], "threads": run["threads"], "real_selection_s": run["default_selection_s"],
               "replayed_selection_s": run["selection_s"][next(iter(run["selection_s"]))],
               "same_kept": run["default_replay_same_kept"]} for run in runs]
    questions = []
    for threads in sorted({run["threads"] for run in question_runs}):
        group = [run for run in question_runs if run["threads"] == threads]
        extra = [question for run in group for question in run["questions"][1:]]
        one_pass = [run["one_pass_prefill_s"] for run in group]
        questions.append({
            "threads": threads, "length": group[0]["length"], "method": group[0]["method"],
            "one_pass_prefill_s": spread(one_pass),
            "first": {key: spread([run["questions"][0][key] for run in group])
                      for key in ("prefix_s", "prefill_s", "selection_s", "decode_s", "wall_s")},
            "extra": {key: spread([question[key] for question in extra])
                      for key in ("prefill_s", "selection_s", "decode_s", "wall_s")},
            "extra_selection_share": spread([q["selection_s"] / statistics.median(one_pass) for q in extra]),
        })
    return {"rows": rows, "replay_checks": checks, "questions": questions}


def _provenance_line(report: dict) -> str:
    where, args = report["provenance"], report["args"]
    load = where["load_average_before"], where["load_average_after"]
    return (f"{report['model']}, {report['dtype']} weights, budget {args['budget']}, "
            f"{args['rounds']} rounds of fresh processes (commit `{where['git']['commit'][:10]}`, load average "
            f"{load[0][0]:.1f} before, {load[1][0]:.1f} after)")


def markdown(report: dict) -> str:
    """The selection-cost table: per method, its selection seconds and their share of its one-pass prefill, per
    prompt length and threads (medians over the rounds, the share's min-max beside it)."""
    from snapkv_cli.bench.render import markdown_table

    summary = summarize(report["runs"], report.get("question_runs", []))
    cells = sorted({(row["length"], row["threads"]) for row in summary["rows"]})
    methods = list(dict.fromkeys(row["method"] for row in summary["rows"]))
    by = {(row["method"], row["length"], row["threads"]): row for row in summary["rows"]}
    header = ["method"] + [f"{length // 1024}k, {threads} thr." for length, threads in cells]
    body = []
    for method in methods:
        line = [f"{method} (default)" if method == methods[0] else method]
        for length, threads in cells:
            row = by[(method, length, threads)]
            share = row["share"]
            line.append(f"{row['selection_s']['median']:.2f} s, {100 * share['median']:.1f}% "
                        f"({100 * share['min']:.1f}-{100 * share['max']:.1f})")
        body.append(line)
    prefill = ["one-pass prefill (full cache)"] + [
        f"{statistics.median(r['full_prefill_s'] for r in report['runs'] if (r['length'], r['threads']) == cell):.1f} s"
        for cell in cells]
    worst = max(summary["rows"], key=lambda row: row["share"]["median"])
    same = all(check["same_kept"] for check in summary["replay_checks"])
    return (_provenance_line(report) + ":\n\n" + markdown_table(header, body + [prefill]) +
            f"\nEach cell: the method's selection seconds and their share of its own one-pass prefill (median, with "
            f"the min-max of the share). Largest median share: {worst['method']} at {worst['length']:,} tokens and "
            f"{worst['threads']} thread(s), {100 * worst['share']['median']:.1f}%. The default method's replayed "
            f"selection kept {'the same' if same else 'NOT the same'} positions as its real prefill in every run.\n")


def questions_markdown(report: dict) -> str:
    """Per question on a shared document prefix (the default method): the first question, then each extra one."""
    from snapkv_cli.bench.render import markdown_table

    summary = summarize(report["runs"], report["question_runs"])

    def cell(spread: dict) -> str:
        return f"{spread['median']:.2f} ({spread['min']:.2f}-{spread['max']:.2f})"

    header = ["threads", "one-pass prefill s", "first: document s", "first: prefill s", "first: selection s",
              "first: decode s", "extra: prefill s", "extra: selection s", "extra: decode s",
              "extra selection / one-pass prefill"]
    body = [[str(row["threads"]), cell(row["one_pass_prefill_s"]), cell(row["first"]["prefix_s"]),
             cell(row["first"]["prefill_s"]), cell(row["first"]["selection_s"]), cell(row["first"]["decode_s"]),
             cell(row["extra"]["prefill_s"]), cell(row["extra"]["selection_s"]), cell(row["extra"]["decode_s"]),
             f"{100 * row['extra_selection_share']['median']:.1f}% ({100 * row['extra_selection_share']['min']:.1f}-"
             f"{100 * row['extra_selection_share']['max']:.1f})"]
            for row in summary["questions"]]
    first = report["question_runs"][0]
    return (_provenance_line(report) + f"; a {first['questions'][0]['prompt_tokens']:,}-token prompt, "
            f"{len(first['questions'])} questions per run, {report['args']['new_tokens']} decoded tokens each, "
            f"method {first['method']}:\n\n" + markdown_table(header, body) +
            "\nSeconds, median (min-max). \"document\": prefilling the shared document prefix (first question "
            "only); \"prefill\": the question's own tokens on it, selection included.\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--threads", default=",".join(map(str, THREADS)))
    parser.add_argument("--dtype", default="auto", help="the model's dtype, as --dtype takes it (default: auto)")
    parser.add_argument("--budget", type=int, default=BUDGET)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", help="comma-separated method labels (default: the CLI's default method, then "
                                          "every compressing method)")
    parser.add_argument("--questions", action=argparse.BooleanOptionalAction, default=True,
                        help="also measure questions on a shared document prefix")
    parser.add_argument("--question-length", type=int, default=QUESTION_LENGTH)
    parser.add_argument("--new-tokens", type=int, default=QUESTION_TOKENS)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, length, threads = args.child.split(":")
        if kind == "selection":
            result = selection_child(int(length), int(threads), args.dtype, args.budget, args.methods.split(","))
        else:
            result = questions_child(int(length), int(threads), args.dtype, args.budget, args.new_tokens)
        print(json.dumps(result))
        return 0
    from snapkv_cli.bench.provenance import run_start

    start = run_start()
    methods = args.methods or ",".join(method_labels())
    lengths = [int(x) for x in args.lengths.split(",")]
    threads = [int(x) for x in args.threads.split(",")]
    jobs = [("selection", length, count) for length in lengths for count in threads]
    if args.questions:
        jobs += [("questions", args.question_length, count) for count in threads]
    common = ["--dtype", args.dtype, "--budget", str(args.budget), "--methods", methods,
              "--new-tokens", str(args.new_tokens)]
    runs, question_runs = [], []
    for round_index in range(args.rounds):
        shift = round_index % len(jobs)
        for kind, length, count in jobs[shift:] + jobs[:shift]:
            result = _child(["--child", f"{kind}:{length}:{count}", *common], count)
            result["round"] = round_index
            (runs if kind == "selection" else question_runs).append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
    summary = summarize(runs, question_runs)
    for row in summary["rows"]:
        print(f"{row['method']:40s} {row['length']:5d} {row['threads']} sel {row['selection_s']['median']:.3f} s "
              f"share {100 * row['share']['median']:.2f}%")
    for row in summary["questions"]:
        print(json.dumps(row))
    if args.out:
        from snapkv_cli.bench.provenance import provenance, write_result

        write_result(args.out, "selection_cost", args, provenance(None, start), model=runs[0]["model"],
                     dtype=runs[0]["dtype"], runs=runs,
                     question_runs=question_runs, **summary)
    return 0


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def selection_cost(path: str) -> str:
    """Every method's selection seconds and share of its one-pass prefill, per
    prompt length and threads, recomputed from the runs."""
    return markdown(prose.load(path))


def selection_cost_questions(path: str) -> str:
    """What each question on a shared document prefix costs, recomputed."""
    return questions_markdown(prose.load(path))


def selection_cost_facts(path: str) -> dict[str, str]:
    """Each method's selection as a share of its prefill on one thread, lowest to
    highest over the lengths (``share-snapkv``; the default method as ``share-default``)."""
    report = prose.load(path)
    rows = report["rows"]
    lengths = sorted({row["length"] for row in rows})
    facts = {"lengths": f"{lengths[0] // 1024}k-{lengths[-1] // 1024}k",
             "host": prose.machine_facts(report["provenance"])["host"]}
    for method in {row["method"] for row in rows}:
        values = [row["share"]["median"] for row in rows if row["method"] == method and row["threads"] == 1]
        facts[f"share-{'default' if method == prose.DEFAULT_METHOD else method}"] = (f"{100 * min(values):.1f}-"
                                                                              f"{100 * max(values):.1f}%")
    return facts


TABLES = {"selection-cost": selection_cost, "selection-cost-questions": selection_cost_questions}
FACTS = {"selection-cost": selection_cost_facts}


if __name__ == "__main__":
    sys.exit(main())
