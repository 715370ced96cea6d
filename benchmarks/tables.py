"""Regenerate, or check, every benchmark table and numeric sentence in the docs from the committed raw JSON (and the
README's table of methods from the method registry, docs/usage.md's commands, options and JSON schemas from the Typer
app and the typed report: :mod:`benchmarks.usage_doc`).

Blocks in the Markdown files look like::

    <!-- generated: speed-table results/speed.json -->
    ...whatever this script wrote...
    <!-- end generated -->

The first word names a generator below, the rest its arguments (paths relative to ``docs/``). Each generator
recomputes its numbers from the raw records of the JSON (accuracy ``outcomes``, speed ``samples``), never from the
summaries stored beside them; ``--check`` also checks those stored summaries against the recomputation. A block
whose JSON is not committed yet says so in words (:func:`not_run`), never with numbers from an older run.

    .venv/bin/python -m benchmarks.tables --write   # after a new run: rewrite the blocks
    .venv/bin/python -m benchmarks.tables --check   # exit 1 and list every block or summary that differs

``tests/test_docs_tables.py`` runs the check, so a table that no longer follows from its JSON fails the tests.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from pathlib import Path

from benchmarks import default_rule, dtype_accuracy, long_cost_bench, mutation, prefill_bench, usage_doc
from benchmarks import methods_timing as methods_timing_script
from benchmarks import selection_cost as selection_cost_script
from benchmarks.peers import llamacpp_bench, peers_bench

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FILES = (DOCS / "benchmarks.md", ROOT / "README.md", DOCS / "guide.md", DOCS / "usage.md", DOCS / "methods.md",
         DOCS / "multi_question.md", DOCS / "peers.md", DOCS / "batch.md", DOCS / "testing.md",
         *sorted((DOCS / "decisions").glob("*.md")))
BLOCK = re.compile(r"^(?P<start>(?P<indent>[ \t]*)<!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)"
                   r"^(?P<end>(?P=indent)<!-- end generated -->)", re.S | re.M)


def _load(name: str) -> dict:
    return json.loads((DOCS / name).read_text(encoding="utf-8"))


def _table(rows) -> str:
    from snapkv_cli.bench.render import markdown_table

    return markdown_table(*rows)


def _ratio(spread: dict, percent: bool = False) -> str:
    if percent:
        return (f"{100 * spread['median']:+.1f}% (interquartile range {100 * spread['q1']:+.1f}% to "
                f"{100 * spread['q3']:+.1f}%)")
    return f"{spread['median']:.2f}x (interquartile range {spread['q1']:.2f}-{spread['q3']:.2f}x)"


# -- generators: each returns the Markdown of one block -------------------------------------------------------------

def _accuracy(paths: tuple[str, ...]) -> dict:
    from snapkv_cli.bench.accuracy import merge_reports

    return merge_reports([_load(path) for path in paths])


def accuracy_table(*paths: str) -> str:
    """Per task, method and budget; per length accuracy and retention (several JSONs: one run per length)."""
    from snapkv_cli.bench.render import accuracy_rows

    return _table(accuracy_rows(_accuracy(paths)))


def accuracy_by_length(*paths: str) -> str:
    """The tasks pooled at each length (never the lengths)."""
    from snapkv_cli.bench.render import accuracy_rows

    header, rows = accuracy_rows(_accuracy(paths), pool_tasks=True)
    return _table((header[1:], [row[1:] for row in rows]))


def prompt_ranges(*paths: str) -> str:
    from snapkv_cli.bench.render import prompt_ranges as ranges

    return _table(ranges(_accuracy(paths)))


def _retention_text(counts) -> str:
    low, high = counts.retention_interval
    return (f"{counts.kept}/{counts.full_correct} = {100 * counts.retention:.0f}% (95% CI {100 * low:.0f}-"
            f"{100 * high:.0f}%; gained {counts.gained}, lost {counts.lost})")


def accuracy_headline(*arguments: str) -> str:
    """Sentences per length: the full cache's accuracy, then each budget's retention with its interval.

    Arguments: the JSON paths, then ``budgets=128,1024`` (which budgets to state).
    """
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    paths = [a for a in arguments if not a.startswith("budgets=")]
    budgets = [int(b) for a in arguments if a.startswith("budgets=") for b in a.split("=", 1)[1].split(",")]
    tallies = tally(outcomes_from_json(_accuracy(tuple(paths))), pool_tasks=True)
    lines = []
    for length in sorted({key[1] for key in tallies}):
        full = tallies[("all", length, "full", None)]
        low, high = full.accuracy_interval
        parts = [f"the full cache answers {full.correct}/{full.samples} ({100 * full.accuracy:.0f}%, 95% CI "
                 f"{100 * low:.0f}-{100 * high:.0f}%)"]
        for budget in budgets:
            counts = tallies.get(("all", length, "snapkv", budget))
            if counts is not None and counts.retention is not None:
                parts.append(f"SnapKV at {budget} keeps {_retention_text(counts)}")
        lines.append(f"- {length:,}-token prompts: " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"


def retention_pooled(*arguments: str) -> str:
    """Retention pooled over tasks and lengths: per budget, each method's pairs kept over every length of the JSONs.

    Arguments: the JSON paths, then ``methods=a,b`` (the columns) and ``budgets=128,256`` (the rows).
    """
    options = dict(argument.split("=", 1) for argument in arguments if "=" in argument)
    paths = tuple(argument for argument in arguments if "=" not in argument)
    pooled = _pooled_retention(paths)
    methods = options["methods"].split(",")
    rows = []
    for budget in options["budgets"].split(","):
        cells = []
        for method in methods:
            counts = pooled.get((method, int(budget)))
            if counts is None or counts.retention is None:
                cells.append("not run")
                continue
            low, high = counts.retention_interval
            cells.append(f"{counts.kept} / {counts.full_correct} ({100 * counts.retention:.1f}%) "
                         f"[{100 * low:.0f}-{100 * high:.0f}]")
        rows.append([budget, *cells])
    return _table((["budget", *(f"{method}: kept / pairs [95% CI]" for method in methods)], rows))


def _pooled_retention(paths: tuple[str, ...]) -> dict:
    """Per (method, budget): the counts of every task and every length of the JSONs pooled, pair by pair."""
    from dataclasses import replace

    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    pooled_length = 0  # every length under one key: tally pools tasks, and this pools the lengths too
    outcomes = [replace(o, length=pooled_length) for o in outcomes_from_json(_accuracy(paths))]
    return {(method, budget): counts for (task, length, method, budget), counts
            in tally(outcomes, pool_tasks=True).items()}


def inspect_found(*paths: str) -> str:
    """``snapkv inspect --find --answer --json`` runs (cut to a few keys by ``jq``): per run, its settings, answer and
    how many (layer, KV head) pairs kept all, some or none of each searched text's tokens."""
    rows = []
    for path in paths:
        run = _load(path)
        settings = run["settings"]
        label = (f"{run['method']}, budget {settings['budget']}, {settings['pooling_window']} pooling"
                 + (", whole words" if settings["whole_words"] else ""))
        for found in run["found"]:
            pairs = found["heads_whole"] + found["heads_part"] + found["heads_none"]
            rows.append([label, f"`{run['answer'].strip()}`", found["text"],
                         f"{found['heads_whole']} / {found['heads_part']} / {found['heads_none']} (of {pairs})"])
    return _table((["run", "answer", "text", "KV heads keeping its tokens: all / some / none"], rows))


def seed_comparison(speed_path: str, prefill_path: str, *accuracy_paths: str) -> str:
    """The seed description's claims beside this project's measurements (retention per length, decode ratio,
    prefill overhead in the speed bench's one process and in ``prefill_bench.py``'s fresh processes)."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally
    from snapkv_cli.bench.speed import compare

    tallies = tally(outcomes_from_json(_accuracy(accuracy_paths)), pool_tasks=True)
    lengths = sorted({key[1] for key in tallies})

    def retained(length: int, budget: int) -> str | None:
        counts = tallies.get(("all", length, "snapkv", budget))
        if counts is None or counts.retention is None:
            return None
        low, high = counts.retention_interval
        return f"{100 * counts.retention:.0f}% [{100 * low:.0f}-{100 * high:.0f}]"

    def retention(budget: int) -> str:
        parts = [f"{length // 1024}k: {retained(length, budget)}" for length in lengths if retained(length, budget)]
        return ", ".join(parts) or "-"

    eightfold = [f"{length // 1024}k at {length // 8}: {retained(length, length // 8)}" for length in lengths
                 if retained(length, length // 8)]

    speed = {(r["length"], r["method"], r["budget"]): r for r in compare(_load(speed_path)["samples"])}
    method = _speed_method(speed_path)
    longest = max(length for length, row_method, _ in speed if row_method == method)
    decode = speed[(longest, method, 1024)]["decode_vs_transformers"]
    decode_256 = speed[(longest, method, 256)]["decode_vs_transformers"]
    own, own_256 = speed[(longest, method, 1024)]["decode_vs_full"], speed[(longest, method, 256)]["decode_vs_full"]
    prefill = speed[(longest, method, 1024)]["prefill_overhead_vs_transformers"]
    prefill_report = _load(prefill_path)
    snapkv = prefill_bench.summarize(prefill_report["runs"])["snapkv"]
    rounds = len(snapkv["wall_vs_plain_per_round"])
    fresh = (f"{100 * (snapkv['wall_vs_plain_median'] - 1):+.1f}% wall, "
             f"{100 * (snapkv['cpu_vs_plain_median'] - 1):+.1f}% CPU time (medians of {rounds} rounds at "
             f"{prefill_report['args']['length']:,} tokens, budget {prefill_report['args']['budget']})")
    rows = [
        ["budget 4096: 99.8%, 1024: 98.9%, 256: 94.2% retention (LongBench, Llama-3-8B)",
         f"1024: {retention(1024)}; 256: {retention(256)} (single needle, kept / full-correct, 95% CI)"],
        ["up to 10x compression at 99.6% retention",
         f"8x (budget = prompt length / 8): {', '.join(eightfold) or '-'}"],
        ["1.5-2x decode throughput at 10x compression",
         f"{decode['median']:.2f}x [{decode['q1']:.2f}-{decode['q3']:.2f}] plain transformers at {longest:,} tokens, "
         f"budget 1024; {decode_256['median']:.2f}x at budget 256 ({_method_name(method)}); compression alone, "
         f"against this project's uncompressed cache: {own['median']:.2f}x [{own['q1']:.2f}-{own['q3']:.2f}] and "
         f"{own_256['median']:.2f}x"],
        ["no prefill overhead", f"{100 * prefill['median']:+.1f}% [{100 * prefill['q1']:+.1f}, "
                                f"{100 * prefill['q3']:+.1f}] against plain transformers at {longest:,} tokens, "
                                f"budget 1024, in the speed bench's one process ({_method_name(method)}); SnapKV in "
                                f"fresh processes: {fresh}"],
    ]
    return _table((["claim (seed)", "measured here (SmolLM2-135M, CPU; median [IQR] or value [95% CI])"], rows))


def speed_table(path: str) -> str:
    from snapkv_cli.bench.render import speed_rows

    return _table(speed_rows(_load(path)))


def speed_comparisons(path: str) -> str:
    from snapkv_cli.bench.render import comparison_rows

    return _table(comparison_rows(_load(path)))


def _speed_method(path: str) -> str:
    """The compressing method of a speed bench's JSON (runs from before the bench took ``--method`` ran SnapKV)."""
    return _load(path)["plan"].get("method", "snapkv")


def _method_name(label: str) -> str:
    """A bench label as the docs' prose names it."""
    return {DEFAULT_METHOD: "the default method", "snapkv": "SnapKV"}.get(label, label)


def _speed(path: str) -> tuple[dict, dict]:
    """The speed bench's paired comparisons and its summary, each keyed by (length, method, budget)."""
    from snapkv_cli.bench.speed import compare, summarize

    samples = _load(path)["samples"]
    return ({(r["length"], r["method"], r["budget"]): r for r in compare(samples)},
            {(r["length"], r["method"], r["budget"]): r for r in summarize(samples)})


def speed_headline(path: str, length: str, budget: str) -> str:
    """Sentences: decode ratios and prefill overhead of the compressing method at one length and budget, from one
    run. The decode gain over plain transformers is this project's cache and compression together; the gain over
    the project's own uncompressed cache is compression's alone."""
    length_, budget_ = int(length), int(budget)
    comparisons, summary = _speed(path)
    method = _speed_method(path)
    snap = comparisons[(length_, method, budget_)]
    plain = comparisons[(length_, "transformers", None)]
    full = summary[(length_, "full", None)]["decode_tokens_per_s"]["median"]
    rate = summary[(length_, method, budget_)]["decode_tokens_per_s"]["median"]
    plain_rate = summary[(length_, "transformers", None)]["decode_tokens_per_s"]["median"]
    floor_rate = summary[(1, "weights-only", None)]["decode_tokens_per_s"]["median"]
    kv = summary[(length_, method, budget_)]["kv_bytes"]
    kv_plain = summary[(length_, "transformers", None)]["kv_bytes"]
    rss = summary[(length_, method, budget_)]["peak_rss_bytes"]["median"]
    rss_plain = summary[(length_, "transformers", None)]["peak_rss_bytes"]["median"]
    repeats = snap["decode_vs_transformers"]["n"]
    lines = [
        f"- Decode at {length_:,} prompt tokens, {_method_name(method)} at budget {budget_:,}: {rate:.1f} tok/s "
        f"against {plain_rate:.1f} for plain transformers, {full:.1f} for this project's cache without compression "
        f"and {floor_rate:.1f} for the weights-only floor (medians of {repeats} rounds). Paired within rounds: "
        f"**{_ratio(snap['decode_vs_transformers'])} plain transformers** (this project's cache and compression "
        f"together), **{_ratio(snap['decode_vs_full'])} this project's own cache without compression** (compression "
        f"alone), and {_ratio(snap['decode_vs_weights_only'])} the weights-only rate. Plain "
        f"transformers itself decodes at "
        f"{_ratio(plain['decode_vs_weights_only'])} the weights-only rate at this length, so no cache could be more "
        f"than about {1 / plain['decode_vs_weights_only']['median']:.2f}x faster than it here.",
        f"- Prefill at {length_:,} tokens, budget {budget_:,}: {_ratio(snap['prefill_overhead_vs_transformers'], True)}"
        f" against plain transformers, {_ratio(snap['prefill_overhead_vs_full'], True)} against the project's own "
        f"cache without compression.",
        f"- KV cache: {kv / 2**20:.1f} MiB against {kv_plain / 2**20:.1f} MiB "
        f"({kv_plain / kv:.1f}x smaller); peak RSS (medians) {rss / 2**20:.0f} MiB against {rss_plain / 2**20:.0f} "
        f"MiB: {(rss_plain - rss) / 2**20:.0f} MiB lower for {(kv_plain - kv) / 2**20:.0f} MiB of KV saved "
        f"({(rss_plain - rss) / (kv_plain - kv):.0%}).",
    ]
    return "\n".join(lines) + "\n"


def provenance(*paths: str) -> str:
    """One line per JSON: the command's commit, machine, libraries, times and the load around it."""
    lines = []
    for path in paths:
        source = _load(path)["provenance"]
        git, machine = source["git"], source["machine"]
        dirty = " (with uncommitted changes)" if git.get("dirty") else ""
        lines.append(f"- `{path}`: `{source['command']}` at commit `{(git.get('commit') or 'unknown')[:10]}`{dirty}, "
                     f"{source['started'][:16].replace('T', ' ')} to {source['finished'][11:16]} UTC; "
                     f"{machine['cpus']} CPUs ({machine['cpu']}), torch {machine['torch']} "
                     f"({machine['torch_threads']} thread{'s' if machine['torch_threads'] != 1 else ''}), "
                     f"transformers {machine['transformers']}; load average "
                     f"{source['load_average_before'][0]:.1f} before, {source['load_average_after'][0]:.1f} after.")
    return "\n".join(lines) + "\n"


def defaults_table(folder: str, *budgets: str) -> str:
    """The defaults sweep (tune split): per setting, full and SnapKV accuracy at each budget, pooled over lengths
    only when the sweep ran a single length (it does)."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    header = ["settings", "full"] + [f"snapkv {budget}" for budget in budgets]
    rows = []
    for path in sorted((DOCS / folder).glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        tallies = tally(outcomes_from_json(report), pool_tasks=True)
        lengths = {key[1] for key in tallies}
        assert len(lengths) == 1, f"{path.name}: the defaults table expects one length"
        (length,) = lengths

        cells = [tallies[("all", length, "full", None)]]
        cells += [tallies[("all", length, "snapkv", int(budget))] for budget in budgets]
        rows.append([path.stem] + [f"{counts.correct}/{counts.samples}" for counts in cells])
    return _table((header, rows))


def multi_question_speed(path: str) -> str:
    """The README's sentence on several questions, from ``multi_question_bench.py``'s JSON (wall times)."""
    report = _load(path)
    wall, per_question = report["wall_s"], report["per_question_s"]
    separate = sum(wall["separate_each"])
    cached, cold = per_question["cached"], per_question["cold"]
    return (f"- Speed (default model, CPU, {report['prompt_tokens']:,}-token prompt, {len(cold)} questions; "
            f"[multi_question.md](multi_question.md)): {len(cold)} separate runs took {separate:.0f} s, "
            f"one multi-question run {wall['multi']:.0f} s ({separate / wall['multi']:.1f}x), the same with the "
            f"document cache loaded from disk {wall['cached_second_run']:.1f} s "
            f"({separate / wall['cached_second_run']:.1f}x; each question {min(cached):.0f}-{max(cached):.0f} s "
            f"instead of {min(cold):.0f}-{max(cold):.0f} s cold) on a 2-core CPU running other jobs"
            f"{_unless_default(report)}.\n")


def multi_question_facts(path: str) -> str:
    """multi_question.md's sentences: provenance, prompt, prefix and the targets, from the script's JSON."""
    report = _load(path)
    git = report.get("git") or {}
    commit = f"commit `{git['commit'][:10]}`" if git.get("commit") else "a commit the JSON does not record"
    wall, times = report["wall_s"], report["per_question_s"]
    separate = sum(wall["separate_each"])
    ratios = [cold / cached for cold, cached in zip(times["cold"], times["cached"])]
    load = report.get("load_average_before"), report.get("load_average_after")
    lines = [
        f"- Run at {commit} with {report['threads']} thread(s), at most {report['max_new_tokens']} new tokens; load "
        f"average {load[0][0]:.1f} before and {load[1][0]:.1f} after.",
        f"- Method: {_method_ran(report)}.",
        f"- The prompt: {report['prompt_tokens']:,} tokens, of which {report['prefix_tokens']:,} are the "
        f"question-independent prefix; the document cache entry is {report['doc_cache_bytes'] / 1e6:.0f} MB.",
        f"- Targets: the multi-question run at least 3x faster than separate runs ({separate / wall['multi']:.1f}x); "
        f"each cached question at least 5x faster than a cold one ({min(ratios):.0f}x to {max(ratios):.0f}x).",
        f"- Prefilling the prefix took {times['multi_prefix_prefill_s']:.1f} s of the multi-question run; loading it "
        f"from disk {times['cached_prefix_load_s']:.2f} s (read, SHA-256, shape and metadata checks); the first "
        f"`--cache-docs` run (which stores it) took {wall['cached_first_run'] - wall['multi']:+.1f} s against the "
        f"run without the cache.",
        f"- Answers: {sum(report['correct'])} of {len(report['correct'])} contain the expected fact; all four ways "
        f"gave the same answers (the script asserts it).",
    ]
    return "\n".join(lines) + "\n"


def multi_question_dtype_readme(path: str) -> str:
    """The README's sentence on float16 on disk, from ``--dtype-check``."""
    check = _load(path)["dtype_check"]
    same, total = (int(part) for part in check["identical_kept_sets"].split("/"))
    answers = len(check["answers_float32"])
    return (f"    rounding a float32 prefix through float16 would halve the file but changed {total - same} of {total} "
            f"per-head kept sets and {answers - check['same_answers']} of {answers} answers.\n")


def multi_question_runs(path: str) -> str:
    """multi_question.md's wall-time table."""
    report = _load(path)
    wall = report["wall_s"]
    separate = sum(wall["separate_each"])
    each = ", ".join(f"{seconds:.1f}" for seconds in wall["separate_each"])
    megabytes = report["doc_cache_bytes"] / 1e6
    rows = [
        [f"{len(wall['separate_each'])} separate `snapkv ask DOC QUESTION --json`", f"{separate:.1f} s ({each})", "1x"],
        ["1 `snapkv ask DOC --questions FILE --json`", f"{wall['multi']:.1f} s",
         f"**{separate / wall['multi']:.1f}x**"],
        [f"same with `--cache-docs`, empty cache (prefills and stores {megabytes:.0f} MB)",
         f"{wall['cached_first_run']:.1f} s", f"{separate / wall['cached_first_run']:.1f}x"],
        ["same with `--cache-docs` again (loads the prefix from disk)", f"{wall['cached_second_run']:.1f} s",
         f"**{separate / wall['cached_second_run']:.1f}x**"],
    ]
    return _table((["run", "wall time", "speed-up"], rows))


def multi_question_per_question(path: str) -> str:
    """multi_question.md's per-question table (cold separate run vs from the disk cache)."""
    report = _load(path)
    times = report["per_question_s"]
    rows = []
    for index, (cold, cached) in enumerate(zip(times["cold"], times["cached"]), start=1):
        label = f"{index} (loads the prefix: {times['cached_prefix_load_s']:.2f} s of it)" if index == 1 else str(index)
        rows.append([label, f"{cold:.1f} s", f"{cached:.1f} s", f"{cold / cached:.1f}x"])
    return _table((["question", "cold (separate run)", "from the disk cache", "ratio"], rows))


def multi_question_dtype(path: str) -> str:
    """multi_question.md's float32-vs-float16 table, from ``--dtype-check``."""
    check = _load(path)["dtype_check"]
    same, total = (int(part) for part in check["identical_kept_sets"].split("/"))
    answers = len(check["answers_float32"])
    rows = [
        ["prefix file", f"{check['prefix_kv_bytes_float32'] / 1e6:.0f} MB "
                        f"({check['prefix_kv_bytes_float32'] / check['prefix_tokens'] / 1e3:.0f} KB per token)",
         f"{check['prefix_kv_bytes_float16'] / 1e6:.0f} MB"],
        ["kept sets (layer x KV head x question) identical to float32", f"{total}/{total}", f"{same}/{total}"],
        ["kept positions shared with float32, mean / worst head", "100%",
         f"{100 * check['mean_kept_overlap']:.2f}% / {100 * check['min_kept_overlap']:.2f}%"],
        ["selection scores, largest absolute difference", "0", f"{check['max_abs_score_difference']:.4f}"],
        ["answers identical to float32", f"{answers}/{answers}", f"{check['same_answers']}/{answers}"],
        ["float32 answers identical to the CLI's (`snapkv ask`)",
         {True: "yes", False: "no"}.get(check.get("float32_matches_cli"), "not checked"), "-"],
    ]
    return _table((["", "float32 (stored as is)", "rounded through float16"], rows))


def chunked_prefill(plain_path: str, chunked_path: str, length: str, budget: str) -> str:
    """Peak RSS and prefill with and without prefill chunks, SnapKV at one length and budget (two runs). Seconds are
    compared only within a run (against that run's plain-transformers prefill, paired by round): the two runs may
    come from different machines or loads."""
    from snapkv_cli.bench.speed import compare, summarize

    rows = []
    for path in (plain_path, chunked_path):
        report = _load(path)
        key = (int(length), _speed_method(path), int(budget))
        row = {(r["length"], r["method"], r["budget"]): r for r in summarize(report["samples"])}[key]
        ratio = {(r["length"], r["method"], r["budget"]): r for r in compare(report["samples"])}[key]
        overhead = ratio["prefill_overhead_vs_transformers"]
        chunk = report["plan"]["chunk_size"]
        rows.append([f"`{path}`", _method_name(key[1]), "one pass" if chunk is None else f"chunks of {chunk}",
                     f"{row['peak_rss_bytes']['median'] / 2**20:.0f} [{row['peak_rss_bytes']['q1'] / 2**20:.0f}, "
                     f"{row['peak_rss_bytes']['q3'] / 2**20:.0f}]",
                     f"{row['prefill_s']['median']:.2f} [{row['prefill_s']['q1']:.2f}, {row['prefill_s']['q3']:.2f}]",
                     f"{100 * overhead['median']:+.1f}% [{100 * overhead['q1']:+.1f}%, {100 * overhead['q3']:+.1f}%]",
                     str(row["repeats"])])
    return _table((["run", "method", "prefill", f"peak RSS MiB (budget {budget}, {int(length):,} tokens)", "prefill s",
                    "prefill vs one-pass plain transformers, same run", "runs"], rows))


def niah_table(path: str) -> str:
    """The Needle In A Haystack headline figure (drawn from the same JSON by ``benchmarks/niah_figure.py``) and the
    exact answers per method, budget and length, recomputed from the outcomes."""
    from snapkv_cli.bench.niah import best_other, outcomes_from_json
    from snapkv_cli.bench.niah_render import niah_rows

    outcomes = outcomes_from_json(_load(path))
    folder = Path(path).parent.as_posix()
    best = best_other(outcomes)
    best_text = "" if best is None else (f"; the fourth panel is the best other method, {best.method} {best.budget} "
                                         f"({best.exact}/{best.total} exact, partial {best.partial:.2f})")
    lines = [f"![NIAH heatmaps]({folder}/niah_headline.png)", "",
             f"Full cache, SnapKV 1024 and SnapKV 256{best_text}; every method's panel is in "
             f"[niah_all.png]({folder}/niah_all.png). Exact answers over the depths of each length:", ""]
    return "\n".join(lines) + "\n" + _table(niah_rows(outcomes))


def niah_kept(path: str) -> str:
    """Exact answers per method, budget and length (as :func:`niah_table`), with the cells the full cache answered
    exactly that each method kept (the needle grid's retention), recomputed from the outcomes."""
    from snapkv_cli.bench.niah import outcomes_from_json
    from snapkv_cli.bench.niah_render import niah_rows

    outcomes = outcomes_from_json(_load(path))
    kept, full_exact = _niah_kept(outcomes)
    header, rows = niah_rows(outcomes)
    for row in rows:
        method, budget = row[0], None if row[1] == "-" else int(row[1])
        row.append("-" if budget is None else _kept_text(kept[(method, budget)], full_exact))
    return _table(([*header, "full cache's exact cells kept, of those compressed"], rows))


def _niah_kept(outcomes) -> tuple[dict, int]:
    """Per compressed (method, budget): (how many of the cells the full cache answered exactly it answered exactly
    too, how many of those cells it compressed: a prompt no longer than the budget is kept whole, so it cannot lose
    them); and how many cells the full cache answered exactly."""
    full_exact = {(o.length, o.depth) for o in outcomes if o.method == "full" and o.exact}
    kept: dict = {}
    for o in outcomes:
        if o.budget is not None and o.prompt_tokens > o.budget and (o.length, o.depth) in full_exact:
            done, cells = kept.get((o.method, o.budget), (0, 0))
            kept[(o.method, o.budget)] = (done + o.exact, cells + 1)
        elif o.budget is not None:
            kept.setdefault((o.method, o.budget), (0, 0))
    return kept, len(full_exact)


def _kept_text(kept: tuple[int, int], full_exact: int, separator: str = "/") -> str:
    """``13/14`` compressed cells kept, with how many of the full cache's exact cells the budget left whole."""
    done, cells = kept
    whole = full_exact - cells
    return f"{done}{separator}{cells}" + (f" (+{whole} not compressed)" if whole else "")


def niah_answers(*paths: str) -> str:
    """Every Needle In A Haystack cell's answer side by side, per method (where the answers matter more than the
    scores: a model that fails at some lengths), with the prompt's tokens and the seconds of the shared prefill;
    the cells of several runs (each JSON one run) by increasing length."""
    from snapkv_cli.bench.niah import outcomes_from_json

    outcomes = sorted((outcome for path in paths for outcome in outcomes_from_json(_load(path))),
                      key=lambda outcome: outcome.length)
    methods = list(dict.fromkeys((o.method, o.budget) for o in outcomes))
    cells: dict[tuple[int, float], dict] = {}
    for outcome in outcomes:
        cells.setdefault((outcome.length, outcome.depth), {})[(outcome.method, outcome.budget)] = outcome

    def shown(outcome) -> str:
        text = " ".join(outcome.answer.split())
        text = text if len(text) <= 70 else text[:69] + "…"
        return f"{'**exact**' if outcome.exact else 'miss'}: {text.replace('|', '/')}"

    rows = []
    for (length, depth), by_method in cells.items():
        first = next(iter(by_method.values()))
        rows.append([f"{length:,}", f"{depth:g}%", f"{first.prompt_tokens:,}", f"{first.prefix_s:.0f}",
                     *(shown(by_method[key]) if key in by_method else "-" for key in methods)])
    header = ["tokens", "depth", "prompt tokens", "document prefill s",
              *(method if budget is None else f"{method} {budget}" for method, budget in methods)]
    return _table((header, rows))


def _report_label(report: dict) -> str:
    """A benchmark's method as its JSON records it (a bench label; none recorded: SnapKV, which those runs used)."""
    return report.get("method") or "snapkv"


def _method_ran(report: dict) -> str:
    """A benchmark's method (:func:`_report_label`), said as the CLI's default method where it still is."""
    from snapkv_cli.bench.grid import default_label

    label = _report_label(report)
    return (f"the CLI's default method, `{label}`" if label == default_label() else
            "SnapKV (`--method snapkv`)" if label == "snapkv" else f"`{label}`")


def _unless_default(report: dict) -> str:
    """A clause naming a benchmark's method where it is not the CLI's default ("" where it is)."""
    from snapkv_cli.bench.grid import default_label

    label = _report_label(report)
    return "" if label == default_label() else \
        f"; measured with {'SnapKV' if label == 'snapkv' else f'`{label}`'}, not the current default method"


def batch_table(path: str) -> str:
    """docs/batch.md's table: the three ways' wall times, per question, a worker's time per answer, the speed-ups."""
    report = _load(path)
    wall, answer = report["wall_s"], report["answer_s_mean"]
    questions = report["documents"] * len(report["questions"])
    labels = {"loop": f"shell loop of `snapkv ask -Q x{len(report['questions'])}`, {report['documents']} processes",
              "batch": "`snapkv batch`, one process", "ray": "`snapkv batch --ray --workers 2`"}
    rows = []
    for name, label in labels.items():
        speedup = f"{wall['loop'] / wall[name]:.2f}x"
        if name == "ray":
            speedup += f" ({wall['batch'] / wall['ray']:.2f}x over one process)"
        rows.append([label, f"{wall[name]:.1f} s", f"{wall[name] / questions:.2f} s", f"{answer[name]:.2f} s",
                     "1x" if name == "loop" else f"**{speedup}**"])
    same = report["same_answers_as_loop"]
    return _table((["way", "wall time", f"per question (wall / {questions})", "a worker's time per answer",
                    "speed-up"], rows)) + (
        f"\nMethod: {_method_ran(report)}. "
        f"Answers identical to the loop's: batch {same['batch']}/{questions}, ray {same['ray']}/{questions}; "
        f"containing the expected fact: loop {report['correct']['loop']}, batch {report['correct']['batch']}, "
        f"ray {report['correct']['ray']} of {questions}.\n")


def long_memory_table(path: str) -> str:
    """``benchmarks/long_memory_bench.py``: where a long prefill's peak RSS comes from, per length and prefill chunk."""
    mib = 2**20
    rows = []
    for run in _load(path)["runs"]:
        others = run["peak_above_loaded"] - run["largest_mask_bytes_with_float_copy"] - run["kv_deferred"]
        rows.append([f"{run['length']:,}", f"{run['chunk']:,}" if run["chunk"] else "one pass",
                     f"{run['prefill_s']:.0f}", f"{run['peak'] / mib:,.0f}", f"{run['rss_loaded'] / mib:,.0f}",
                     f"{run['weights'] / mib:,.0f}", f"{run['peak_above_loaded'] / mib:,.0f}",
                     f"{run['largest_mask_bytes_with_float_copy'] / mib:,.0f}", f"{run['kv_deferred'] / mib:,.0f}",
                     f"{others / mib:,.0f}", f"{run['kv_stored'] / mib:,.1f}"])
    return _table((["tokens", "prefill chunk", "prefill s", "peak RSS MiB", "loaded MiB", "of which weights",
                    "peak above loaded", "largest mask (bool + float copy)", "global KV held until the last chunk",
                    "rest (activations, allocator)", "KV kept MiB"], rows))


def long_cost_table(path: str) -> str:
    """``benchmarks/long_cost_bench.py``: cost against prompt length, every run, and the growth exponents."""
    return long_cost_bench.markdown(_load(path)["runs"])


def long_document(path: str) -> str:
    """``benchmarks/long_document_run.py``: one ``snapkv ask`` about a long PDF, its answer and what it cost."""
    result = _load(path)
    report, where = result["report"], result["provenance"]
    timings, cache, prompt = report["timings"], report["cache"], report["prompt"]
    sliding = sum(layer["sliding_window"] for layer in report["layers"])
    found = result["fact"].rstrip(".").split()[-2:]  # "smoked juniper"
    right = all(word.lower() in report["answer"].lower() for word in found)
    return (f"`{result['ask_command']}` at commit `{where['git']['commit'][:10]}` ({where['started'][:16]} UTC; "
            f"{where['machine']['cpus']} CPUs, torch {where['machine']['torch']}, load average "
            f"{where['load_average_before'][0]} before, {where['load_average_after'][0]} after):\n\n"
            f"- Method: {_method_ran(result)}, budget {report['settings']['budget']}.\n"
            f"- Prompt: {report['prompt_tokens']:,} tokens ({prompt['document']:,} of them the document's "
            f"{len(report['pages'])} PDF pages), template `{prompt['template_name']}` ({prompt['style']} style); "
            f"the answer stopped at `{json.dumps(report['stop']['stopped_by'])}`.\n"
            f"- Answer: \"{report['answer'].strip()}\" ({'right' if right else 'wrong'}: the planted fact is "
            f"\"{result['fact']}\").\n"
            f"- Load {timings['load_s']:.0f} s, prefill {timings['prefill_s']:.0f} s (selection "
            f"{timings['selection_s']:.2f} s), decode {timings['decode_tokens_per_s']:.1f} tokens/s.\n"
            f"- KV cache {cache['bytes_before'] / 1e6:.0f} MB before, {cache['bytes_after'] / 1e6:.1f} MB after "
            f"({sliding} of {len(report['layers'])} layers sliding-window, which keep their window either way); peak "
            f"RSS {report['memory']['peak_rss_bytes'] / 2**30:.2f} GiB.\n")


def decode_profile(path: str) -> str:
    """``benchmarks/decode_profile.py``: the output projection's share of a decode step with a large vocabulary."""
    result = _load(path)
    run, where = result["report"], result["provenance"]
    last_only = run["prefill_lm_head_rows"] == [1]
    return (f"{run['model']} (vocabulary {run['vocab']:,}, hidden size {run['hidden']}), "
            f"{run['prompt_tokens']:,}-token prompt, SnapKV 1024, {run['torch_threads']} thread (commit "
            f"`{where['git']['commit'][:10]}`): a decode step took {run['step_ms']:.0f} ms "
            f"({run['decode_tokens_per_s']:.1f} tokens/s), of which the output projection "
            f"`lm_head` {run['lm_head_ms_in_step']:.0f} ms (**{100 * run['lm_head_share']:.0f}%**). The prefill "
            + ("computed logits for the last position only (every prefill forward's `lm_head` saw one row). "
               if last_only else f"computed logits for {run['prefill_lm_head_rows']} rows per forward. ")
            + f"The projection alone took {run['lm_head_alone_float32_ms']:.0f} ms in float32 and "
            f"{run['lm_head_alone_bfloat16_ms']:.0f} ms in bfloat16.\n")


def methods_timing(path: str) -> str:
    """``benchmarks/methods_timing.py``: every method's prefill, selection and decode next to SnapKV's, recomputed from
    the runs."""
    report = _load(path)
    script, args, where = methods_timing_script, report["args"], report["provenance"]
    load = where["load_average_before"], where["load_average_after"]
    return (f"{report['prompt_tokens']:,}-token prompt, budget {args['budget']}, {args['new_tokens']} decoded tokens, "
            f"{args['rounds']} rounds, {where['machine']['torch_threads']} thread (commit "
            f"`{where['git']['commit'][:10]}`, load average {load[0][0]:.1f} before, {load[1][0]:.1f} after):\n\n"
            + script.markdown(script.summarize(report["runs"])))


def selection_cost(path: str) -> str:
    """``benchmarks/selection_cost.py``: every method's selection seconds and share of its one-pass prefill, per
    prompt length and threads, recomputed from the runs."""
    return selection_cost_script.markdown(_load(path))


def selection_cost_questions(path: str) -> str:
    """``benchmarks/selection_cost.py``: what each question on a shared document prefix costs, recomputed."""
    return selection_cost_script.questions_markdown(_load(path))


def batch_readme(path: str) -> str:
    """The README's sentence on ``snapkv batch``'s speed, from ``batch_bench.py``'s JSON."""
    report = _load(path)
    wall, same = report["wall_s"], report["same_answers_as_loop"]
    questions = report["documents"] * len(report["questions"])
    identical = "all with the same" if same["batch"] == same["ray"] == questions else "with"
    return (f"a shell loop of `snapkv ask -Q x{len(report['questions'])}` per document took {wall['loop']:.0f} s, one "
            f"`snapkv batch` {wall['batch']:.0f} s ({wall['loop'] / wall['batch']:.1f}x: one start-up and model load "
            f"instead of {report['documents']}), `snapkv batch --ray --workers 2` {wall['ray']:.0f} s "
            f"({wall['loop'] / wall['ray']:.1f}x), {identical} {questions} answers{_unless_default(report)}.\n")


def _same(rows: list[dict], mine: tuple[str, int | None], theirs: tuple[str, int | None]) -> tuple[int, int, int]:
    """Two configurations (label, budget) on the same prompts: (identical answers, same verdicts, prompts)."""
    by_key = {(row["prompt"], row["label"], row["budget"]): row for row in rows}
    prompts = list(dict.fromkeys(row["prompt"] for row in rows))
    pairs = [(by_key[(p, *mine)], by_key[(p, *theirs)]) for p in prompts]
    return (sum(a["answer"] == b["answer"] for a, b in pairs), sum(a["correct"] == b["correct"] for a, b in pairs),
            len(prompts))


def _peers_agreement(report: dict) -> list[tuple[str, str, int | None, int, int, int]]:
    """snapkv-cli's configurations against their peers on the same prompts: (mine, theirs, budget, identical answers,
    same verdicts, prompts)."""
    rows = peers_bench.rows_of(report)
    budgets = sorted({row["budget"] for row in rows if row["budget"]})
    pairs = [("snapkv-cli full", "transformers (kvpress venv)", None)]
    pairs += [(ours_label, "kvpress-ours", budget) for budget in budgets
              for ours_label in ("snapkv-cli snapkv avgpool", "snapkv-cli snapkv")]
    return [(mine, theirs, budget, *_same(rows, (mine, budget), (theirs, budget))) for mine, theirs, budget in pairs]


def _agreement_table(rows: list[dict], pairs, sides: bool = False) -> str:
    """(mine, theirs) configurations, each (label, budget), compared prompt by prompt (``sides``: also how many
    prompts only one of them answered right)."""
    def name(label: str, budget: int | None) -> str:
        return label + (f" {budget}" if budget else "")

    def right(label: str, budget: int | None) -> set[str]:
        return {row["prompt"] for row in rows if (row["label"], row["budget"]) == (label, budget) and row["correct"]}

    cells = []
    for mine, theirs in pairs:
        answers, verdicts, prompts = _same(rows, mine, theirs)
        cells.append([name(*mine), name(*theirs), f"{answers}/{prompts}", f"{verdicts}/{prompts}"]
                     + ([str(len(right(*mine) - right(*theirs))), str(len(right(*theirs) - right(*mine)))]
                        if sides else []))
    return _table((["snapkv-cli", "peer", "identical answers", "same verdict"]
                   + (["right only with snapkv-cli", "right only with the peer"] if sides else []), cells))


def _versions(report: dict) -> str:
    versions, ours = report["kvpress_environment"], report["snapkv_cli"]
    return (f"snapkv-cli ran on torch {ours['torch']} with transformers {ours['transformers']}; kvpress "
            f"{versions['kvpress']} on torch {versions['torch']} with transformers {versions['transformers']}, in its "
            f"own environment.")


def peers_table(path: str) -> str:
    """snapkv-cli against kvpress and plain transformers on the same prompts, recomputed from every answer."""
    report = _load(path)
    return (_versions(report) + "\n\n" + peers_bench.markdown_summary(peers_bench.rows_of(report))
            + "\nThe same prompts, answer by answer:\n\n"
            + _agreement_table(peers_bench.rows_of(report), [((mine, budget), (theirs, budget))
                                                             for mine, theirs, budget, *_ in _peers_agreement(report)]))


def _press_text(press: dict) -> str:
    """A kvpress press as it was built: class(parameters), a wrapped press inside."""
    inner = press.get("press")
    parameters = [f"{name}={value}" for name, value in press.items()
                  if name in ("window_size", "kernel_size", "first_stage_ratio", "epsilon", "alpha_safeguard")]
    return f"`{press['class']}({', '.join(parameters)})`" + (f" around {_press_text(inner)}" if inner else "")


def _held(rows: list[dict], label: str, budget: int, prompts: list[str]) -> int:
    """How many of ``prompts`` (those the full cache answered) ``label`` at ``budget`` answered too."""
    correct = {row["prompt"] for row in rows if (row["label"], row["budget"]) == (label, budget) and row["correct"]}
    return len(correct & set(prompts))


def peers_default_table(path: str) -> str:
    """The CLI's default method beside kvpress's nearest press and the full cache, on the same prompts: the summary,
    what the nearest press is, how many of the full cache's right answers each kept, and answer-by-answer
    agreement, recomputed from every answer."""
    report = _load(path)
    rows = peers_bench.rows_of(report)
    budgets = sorted({row["budget"] for row in rows if row["budget"]})
    nearest = next(row["press"] for row in rows if row["label"] == "kvpress-nearest")
    default = next(row for row in rows if row["label"] == "snapkv-cli default")
    settings = default["settings"]
    full_right = [row["prompt"] for row in rows if row["label"] == "snapkv-cli full" and row["correct"]]
    kinds = {row["prompt"]: row["kind"] for row in rows}
    full_niah = [p for p in full_right if kinds[p] == "niah"]
    full_accuracy = [p for p in full_right if kinds[p] == "accuracy"]
    held = _table((["system", "budget", f"of the full cache's {len(full_niah)} exact NIAH cells",
                    f"of its {len(full_accuracy)} right accuracy samples"],
                   [[label, str(budget), str(_held(rows, label, budget, full_niah)),
                     str(_held(rows, label, budget, full_accuracy))]
                    for budget in budgets for label in ("snapkv-cli default", "kvpress-nearest")]))
    pairs = [(("snapkv-cli default", budget), (theirs, budget if theirs != "snapkv-cli full" else None))
             for budget in budgets for theirs in ("kvpress-nearest", "snapkv-cli full")]
    return (_versions(report) + f" snapkv-cli default: `{default['method']}` ({settings['method']}, window "
            f"{settings['window_size']}, kernel {settings['kernel_size']}, {settings['pooling']}, "
            f"{settings['pooling_window']} pooling window, {settings['head_budgets']} heads); kvpress-nearest: "
            f"{_press_text(nearest)}, {nearest['nearest_to_note']}.\n\n"
            + peers_bench.markdown_summary(rows) + "\nThe full cache's right answers each kept:\n\n" + held
            + "\nThe same prompts, answer by answer:\n\n" + _agreement_table(rows, pairs, sides=True))


def llamacpp_table(path: str) -> str:
    """snapkv-cli next to llama.cpp on the same GGUF and prompt ids, recomputed from every run (fresh processes)."""
    report = _load(path)
    runs = report["runs"]
    theirs = next(run for run in runs if run["tool"] == "llama.cpp")
    ours = [run for run in runs if run["tool"] == "snapkv-cli"]
    settings = sorted({(run["method"], run["budget"], run["dtype"]) for run in ours}, key=str)
    said = "; ".join(f"{method}, budget {budget}, {dtype} weights" for method, budget, dtype in settings)
    loads = [run["load_average"][0] for run in runs if run.get("load_average")]
    rounds = len({run["round"] for run in runs})
    extensions = ", ".join(llamacpp_bench.vector_extensions(theirs["system_info"])) or "no AVX2"
    return (f"snapkv-cli: `snapkv ask` with its defaults ({said}); llama.cpp: llama-cpp-python "
            f"{theirs['llama_cpp_python']} built from source ({extensions}, flash attention on) on "
            f"`{report['gguf']['file']}`, the file the built-in model is converted from. {rounds} rounds, fresh "
            f"processes, median (min-max); "
            f"load average during the runs {min(loads):.1f}-{max(loads):.1f}.\n\n"
            + llamacpp_bench.markdown(llamacpp_bench.summarize(runs), report["args"]["model"]))


def decode_weights_sentence(path: str) -> str:
    """What ``--decode-weights bfloat16`` measured against float32 and llama.cpp (llama.cpp peer bench run with
    ``--decode-weights same bfloat16``), as one sentence per thread count: the paired ratios' range over lengths."""
    report = _load(path)
    runs = report["runs"]
    fast = llamacpp_bench.snapkv_tool("bfloat16")
    rows = llamacpp_bench.summarize(runs)
    machine = report["provenance"]["machine"]
    loads = [run["load_average"][0] for run in runs if run.get("load_average")]

    def span(key: str, metric: str, selected: list[dict]) -> str:
        low = min(row[key][metric]["min"] for row in selected)
        high = max(row[key][metric]["max"] for row in selected)
        return f"{low:.2f}x" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}x"

    parts = []
    for threads in sorted({row["threads"] for row in rows}):
        selected = [row for row in rows if row["threads"] == threads and f"{fast}_over_llamacpp" in row]
        if not selected:
            continue
        lengths = " and ".join(f"{row['length']:,}" for row in selected)
        parts.append(
            f"at {lengths} tokens on {threads} thread{'s' if threads > 1 else ''}, bfloat16 decoding steps ran "
            f"{span(f'{fast}_over_snapkv-cli', 'decode_tokens_per_s', selected)} float32's decode speed and "
            f"{span(f'{fast}_over_llamacpp', 'decode_tokens_per_s', selected)} llama.cpp's, and read the prompt "
            f"{span(f'{fast}_over_llamacpp', 'prefill_tokens_per_s', selected)} llama.cpp's speed")
    rounds = len({run["round"] for run in runs})
    return (f"Measured on a {machine['cpus']}-core {machine['cpu']} with {', '.join(machine['cpu_features'])} (no "
            f"native bfloat16), {rounds} paired round{'s' if rounds > 1 else ''} in fresh processes, load average "
            f"{min(loads):.1f}-{max(loads):.1f} (other jobs shared the machine): " + "; ".join(parts) + ".\n")


def dtype_retention(folder: str, *niah_reference: str, candidate: str = "bfloat16",
                    header: str = "float32's right answers kept in bfloat16") -> str:
    """What bfloat16 weights (or another ``candidate`` run) keep of float32's right answers (bench test split) and
    exact needle cells, paired; a candidate without a needle run says so in its needle column."""
    summary = dtype_accuracy.summarize(DOCS / folder, "float32", candidate, [DOCS / path for path in niah_reference])
    niah_rows = summary["niah"]["by_label"] if "niah" in summary else {}
    rows = []
    for label, row in summary["accuracy"]["by_label"].items():
        niah = niah_rows.get(label, {})
        rows.append([label, f"{row['kept']} / {row['reference_correct']}", _percent_interval(row["retention_interval"]),
                     f"+{row['gained']} -{row['lost']}", f"{row['same_answer']} / {row['pairs']}",
                     f"{niah.get('kept', '-')} / {niah.get('reference_exact', '-')}" if "niah" in summary
                     else "not run"])
    total = summary["accuracy"]["pooled"]
    rows.append(["all", f"{total['kept']} / {total['reference_correct']} ({100 * total['retention']:.1f}%)",
                 _percent_interval(total["retention_interval"]), f"+{total['gained']} -{total['lost']}", "",
                 f"{summary['niah']['lost_cells']} lost" if "niah" in summary else "not run"])
    return _table((["method", header, "interval", "gained / lost", "identical answers", "exact needle cells kept"],
                   rows))


def decode_step_profile_table(path: str) -> str:
    """``benchmarks/decode_step_profile.py``: a decoding step's time, float32 against bfloat16 steps (paired rounds),
    and the ops that take it (torch.profiler, self CPU time per step)."""
    report = _load(path)
    summary, profiles = report["summary"], report["profiles"]
    ops: dict[str, dict] = {}
    for name, profile in profiles.items():
        for op in profile["ops"]:
            ops.setdefault(op["op"], {})[name] = op["self_ms_per_step"]
    top = sorted(ops, key=lambda op: -max(ops[op].values()))[:6]
    rows = [[f"`{op}`", *[f"{ops[op][name]:.1f}" if name in ops[op] else "-" for name in profiles]] for op in top]
    rows.append(["all ops (self CPU time)", *[f"{profile['self_cpu_ms_per_step']:.1f}" for profile in
                                             profiles.values()]])
    machine = report["provenance"]["machine"]
    load = report["provenance"]
    return (f"{report['prompt_tokens']:,}-token prompt, compressed (budget 1024), {report['cache_positions']:,} cache "
            f"positions after the steps; {len(report['rounds'])} paired rounds of {report['args']['steps']} steps: "
            f"float32 {summary['float32_ms_median']:.0f} ms per step, bfloat16 steps "
            f"{summary['bf16_ms_median']:.0f} ms (median), the bfloat16 steps "
            f"{summary['speedup_min']:.2f}-{summary['speedup_max']:.2f}x as fast "
            f"(median {summary['speedup_median']:.2f}x); {machine['cpu']} ({', '.join(machine['cpu_features'])}), "
            f"{machine['torch_threads']} thread, load average {load['load_average_before'][0]} before, "
            f"{load['load_average_after'][0]} after.\n\n"
            + _table((["op (ms per step)", *profiles], rows)))


def decode_weights_retention(folder: str, *niah_reference: str) -> str:
    """What bfloat16 decoding steps (``--decode-weights bfloat16``, run ``decode-bf16``) keep of float32's right
    answers and exact needle cells, paired as :func:`dtype_retention`."""
    return dtype_retention(folder, *niah_reference, candidate="decode-bf16",
                           header="float32's right answers kept with bfloat16 decoding steps")


def default_rule_table(folder: str) -> str:
    """The committed default-method rule applied to its confirmation run (recomputed from the run's JSON)."""
    result = default_rule.decide(DOCS / folder)
    prefill = result["prefill_vs_snapkv"]
    rows = []
    for budget, block in result["budgets"].items():
        for label, row in block["candidates"].items():
            against = row["against_best"]
            cost = prefill.get(label)
            rows.append([label, str(budget), f"{row['kept']} / {result['full_right_pairs']}",
                         f"{row['docqa_kept']} / {result['docqa_full_right_pairs']}",
                         f"{100 * against['difference']:+.1f} points [{100 * against['interval'][0]:+.1f}, "
                         f"{100 * against['interval'][1]:+.1f}]" + (" tie" if against["tie"] else ""),
                         ", ".join(f"{length // 1024}k {depth:.0f}%" for length, depth in row["niah_lost"]) or "none",
                         f"{cost['median']:.2f} ({cost['min']:.2f}-{cost['max']:.2f})"
                         if cost and str(budget) == "1024" else "-"])
    return (_table((["candidate", "budget", "full cache's right answers kept", "of which docqa",
                     "against the best (95% interval)", "needle cells lost", "prefill / SnapKV's (8k, 1024)"], rows))
            + f"\nThe best at 1024: `{result['budgets'][1024]['best']}`. Outcome: `{result['default']}` "
            f"({result['why']}); at 256 the best is `{result['small_budget_choice']}`.\n")


def default_readme(folder: str, selection_path: str) -> str:
    """The README's two sentences on the default method: what the rule's confirmation run found against SnapKV at
    both budgets, and what its selection step costs beside SnapKV's (one thread, from the selection-cost run)."""
    result = default_rule.decide(DOCS / folder)
    chosen, full = result["default"], result["full_right_pairs"]
    if chosen != DEFAULT_METHOD:
        raise ValueError(f"the rule picked {chosen}, but the CLI's default is {DEFAULT_METHOD}")
    kept = {budget: {label: row["kept"] for label, row in block["candidates"].items()}
            for budget, block in result["budgets"].items()}
    rows = _load(selection_path)["rows"]

    def shares(method: str) -> str:
        values = [row["share"]["median"] for row in rows if row["method"] == method and row["threads"] == 1]
        return f"{100 * min(values):.1f}-{100 * max(values):.1f}%"

    lengths = sorted({row["length"] for row in rows})
    tie = "a tie by the rule" if result["budgets"][1024]["candidates"]["snapkv"]["against_best"]["tie"] else "a loss"
    return (f"The default method is DefensiveKV with one budget for every KV head and a causal pooling window: on "
            f"fresh test data, judged by a rule fixed before the run, it kept {kept[1024][chosen]} of the full cache's "
            f"{full} right answers at the default budget of 1024 where SnapKV kept {kept[1024]['snapkv']} ({tie}), and "
            f"{kept[256][chosen]} where SnapKV kept {kept[256]['snapkv']} at 256. What it costs: choosing the kept "
            f"positions takes {shares(chosen)} of the prefill on one thread at {lengths[0] // 1024}k-"
            f"{lengths[-1] // 1024}k tokens, against {shares('snapkv')} for SnapKV (`--method snapkv`).\n")


def decode_speed(path: str) -> str:
    """Decode tok/s from a compressed cache: this project's step, the grouped-query dispatch it replaced in reduced
    precision, and the model's bare forward on a plain cache (median and interquartile range over the rounds)."""
    report = _load(path)
    cells: dict = {}
    for result in report["results"]:
        stats = result["decode_tokens_per_s"]
        cells.setdefault((result["dtype"], result["threads"], result["length"]), {})[result["row"]] = (
            f"{stats['median']:.1f} ({stats['q1']:.1f}-{stats['q3']:.1f})")
    rows = [[dtype, str(threads), f"{length:,}", row.get("snapkv", "-"), row.get("snapkv-gqa", "-"),
             row.get("model-only", "-")] for (dtype, threads, length), row in sorted(cells.items())]
    return _table((["weights", "threads", "prompt tokens", "snapkv-cli", "grouped dispatch (before)",
                    "model's own forward, plain cache"], rows))


def prefill_table(path: str) -> str:
    """``benchmarks/prefill_bench.py``: each variant's prefill in fresh processes, medians and the per-round ratio to
    plain transformers (wall and CPU time), recomputed from the runs."""
    report = _load(path)
    summary = prefill_bench.summarize(report["runs"])
    methods = {run["variant"]: run.get("method") for run in report["runs"]}
    rows = []
    for variant, row in summary.items():
        if variant == "memory_target":
            continue
        per_round = ", ".join(f"{100 * (ratio - 1):+.1f}%" for ratio in row["wall_vs_plain_per_round"])
        rows.append([f"`{variant}`", f"`{methods[variant]}`" if methods[variant] else "-", f"{row['wall_s']:.2f}",
                     f"{row['selection_s']:.2f}", f"{100 * (row['wall_vs_plain_median'] - 1):+.1f}%", per_round,
                     f"{100 * (row['cpu_vs_plain_median'] - 1):+.1f}%", f"{row['sys_s']:.2f}",
                     f"{row['minor_faults'] / 1e6:.2f}", f"{row['peak_rss_bytes'] / 2**20:.0f}",
                     f"{row['kv_bytes'] / 2**20:.1f}"])
    table = _table((["variant", "method", "wall s", "of which selection s", "wall vs plain (median)",
                     "wall vs plain, each round", "CPU vs plain", "sys s", "minor faults (M)", "peak RSS MiB",
                     "KV MiB"], rows))
    default = prefill_bench.COMPRESSING
    if default in summary:
        row = summary[default]
        table += (f"\n`{default}`'s selection took {row['selection_s']:.1f} s of its {row['wall_s']:.1f} s prefill "
                  f"(medians, {100 * row['selection_s'] / row['wall_s']:.0f}%)"
                  + (f"; `snapkv`'s {summary['snapkv']['selection_s']:.1f} s of {summary['snapkv']['wall_s']:.1f} s"
                     if "snapkv" in summary else "") + ".\n")
    target = summary.get("memory_target")
    if not target:
        return table
    return table + (f"\nPeak RSS of `{prefill_bench.COMPRESSING}` is {target['peak_rss_below_full'] / 2**20:.0f} MiB "
                    f"below `full` for {target['kv_bytes_saved'] / 2**20:.0f} MiB of KV saved "
                    f"({target['share_of_saved']:.0%}; the target is at least 80%).\n")


def weight_dtype_table(path: str) -> str:
    """``benchmarks/weight_dtype_bench.py``: each weight variant's prefill and decode speed, their ratios to float32
    within each round, peak RSS and load time, as min / median / max over the rounds."""
    report = _load(path)
    labels = {"float32": "float32", "bfloat16": "bfloat16", "int8": "bfloat16 + int8", "float32-int8": "float32 + int8"}

    def spread(row: dict, key: str, digits: int) -> str:
        return " / ".join(f"{row[key][part]:.{digits}f}" for part in ("min", "median", "max"))

    rows = [[labels.get(variant, variant), spread(row, "prefill_tokens_per_s", 0), spread(row, "prefill_vs_float32", 2),
             spread(row, "decode_tokens_per_s", 1), spread(row, "decode_vs_float32", 2), spread(row, "peak_rss_mb", 0),
             spread(row, "load_s", 2)]
            for variant, row in report["summary"].items()]
    return _table((["weights", "prefill tok/s", "prefill vs float32", "decode tok/s", "decode vs float32",
                    "peak RSS MB", "load_s"], rows))


def kernel_probe_table(path: str) -> str:
    """``benchmarks/kernel_probe.py``: each product's milliseconds per call per kernel (median of the rounds) and its
    speed against float32 within each round (median, min-max)."""
    report = _load(path)
    variants = ("float32", "bf16_onednn", "bf16_no_onednn", "int8_bf16", "int8_f32")
    names = {"float32": "float32", "bf16_onednn": "bf16, oneDNN on", "bf16_no_onednn": "bf16, oneDNN off",
             "int8_bf16": "int8 op, bf16 x", "int8_f32": "int8 op, float32 x"}

    def cell(row: dict, variant: str) -> str:
        if variant not in row:
            return ""
        value = row[variant]
        if variant == "float32":
            return f"{value['ms_median']:.3g} ms"
        return (f"{value['ms_median']:.3g} ms, x{value['speedup_vs_float32_median']:.2f} "
                f"({value['speedup_vs_float32_min']:.2f}-{value['speedup_vs_float32_max']:.2f})")

    rows = [[f"`{shape}`", *[cell(row, variant) for variant in variants]]
            for block in ("decode", "prefill") for shape, row in report[block].items()]
    machine = report["provenance"]["machine"]
    table = _table((["product (x @ W.T)", *[names[variant] for variant in variants]], rows))
    return table + (f"\n{machine['cpu']}, vector features {', '.join(machine['cpu_features'])} (no native bfloat16: "
                    f"{report['native_bf16'] is None}), torch {machine['torch']}, {machine['torch_threads']} thread, "
                    f"load average {report['provenance']['load_average_before'][0]} before, "
                    f"{report['provenance']['load_average_after'][0]} after.\n")


def methods_table() -> str:
    """The README's table of methods, from the method registry (:mod:`snapkv_cli.engine.methods`)."""
    from snapkv_cli.engine.methods import METHODS

    return _table((["method", "paper", "what each layer and KV head keeps"],
                   [[f"`{method.name}`", method.paper, method.keeps] for method in METHODS.values()]))


# -- the page's summary: one row per headline claim ----------------------------------------------------------------

DEFAULT_METHOD = "defensivekv+uniformheads+causalpool"  # the CLI's default method, as the bench labels it
# Every test pair of the default at 4k-8k: each task's shard (every method and the full cache), the default's own
# runs on the 4k shards' samples, and the second 4k draw of the two tasks the full cache answers.
DEFAULT_TEST_PAIRS = tuple(
    [f"results/beyond/4096_{task}.json" for task in ("single_needle", "multi_key", "multi_value", "question_first",
                                                     "variable_tracking")]
    + [f"results/beyond/4096_{task}_{DEFAULT_METHOD}.json" for task in ("single_needle", "multi_key", "multi_value",
                                                                         "question_first")]
    + [f"results/beyond/4096_{task}_seed1.json" for task in ("single_needle", "multi_key")]
    + [f"results/beyond/8192_{task}.json" for task in ("single_needle", "multi_key", "multi_value",
                                                       "variable_tracking", "question_first")])
RUN_BENCHMARKS = ROOT / "benchmarks" / "run_benchmarks.sh"


def _percent_interval(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"{100 * interval[0]:.0f}-{100 * interval[1]:.0f}% (95% CI)"


def _check_default_label() -> None:
    """The rows that speak of "the default method" read its bench label: it must still be what the CLI runs."""
    from snapkv_cli import defaults
    from snapkv_cli.bench.grid import parse_label

    assert parse_label(DEFAULT_METHOD) == (defaults.METHOD, defaults.METHOD_SETTINGS), \
        f"{DEFAULT_METHOD} is no longer the CLI's default method: rerun its benchmarks or relabel these rows"


def _glance_default_retention(budget: int) -> tuple:
    counts = _pooled_retention(DEFAULT_TEST_PAIRS)[(DEFAULT_METHOD, budget)]
    return (f"Default method at budget {budget}: the full cache's right answers it keeps (every task, 4k-8k-token "
            f"test prompts)", f"{counts.kept} / {counts.full_correct} ({100 * counts.retention:.1f}%)",
            _percent_interval(counts.retention_interval), ("beyond", "beyonddefault", "beyondseed1"),
            DEFAULT_TEST_PAIRS)


def _glance_snapkv_headline() -> tuple:
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    paths = ("results/accuracy_headline_4k.json", "results/accuracy_headline_8k.json")
    budget = 1024
    tallies = tally(outcomes_from_json(_accuracy(paths)), pool_tasks=True)
    lengths = sorted({key[1] for key in tallies})
    counts = {length: tallies[("all", length, "snapkv", budget)] for length in lengths}
    return (f"SnapKV at budget {budget}: the full cache's right answers it keeps (single needle, "
            + " and ".join(f"{length // 1024}k" for length in lengths) + " tokens)",
            "; ".join(f"{length // 1024}k: {c.kept} / {c.full_correct}" for length, c in counts.items()),
            "; ".join(f"{length // 1024}k: {_percent_interval(c.retention_interval)}" for length, c in counts.items()),
            ("headline",), paths)


def _glance_decode() -> tuple:
    path, length, budget = "results/speed.json", 8192, 1024
    comparisons, _ = _speed(path)
    method = _speed_method(path)
    ratio = comparisons[(length, method, budget)]["decode_vs_transformers"]
    own = comparisons[(length, method, budget)].get("decode_vs_full")
    own_text = f"; {own['median']:.2f}x this project's uncompressed cache" if own else ""
    return (f"Decode speed, {_method_name(method)} at budget {budget}, prompts of {length:,} tokens, against plain "
            f"transformers (the cache's own speed and compression together{', then compression alone' if own else ''})",
            f"{ratio['median']:.2f}x{own_text}", f"{ratio['q1']:.2f}-{ratio['q3']:.2f}x (interquartile range, "
            f"{ratio['n']} rounds)", ("speed",), (path,))


def _glance_kv() -> tuple:
    path, length, budget = "results/speed.json", 8192, 1024
    _, summary = _speed(path)
    method = _speed_method(path)
    kv, kv_plain = summary[(length, method, budget)]["kv_bytes"], summary[(length, "transformers", None)]["kv_bytes"]
    return (f"KV cache, {_method_name(method)} at budget {budget}, prompts of {length:,} tokens, against plain "
            f"transformers",
            f"{kv / 2**20:.1f} MiB against {kv_plain / 2**20:.1f} MiB ({kv_plain / kv:.1f}x smaller)", "-",
            ("speed",), (path,))


def _glance_prefill() -> tuple:
    path = "results/prefill.json"
    report = _load(path)
    default = prefill_bench.summarize(report["runs"])[prefill_bench.COMPRESSING]
    rounds = default["wall_vs_plain_per_round"]
    ran = _method_ran({"method": next(run.get("method") for run in report["runs"]
                                      if run["variant"] == prefill_bench.COMPRESSING)})
    return (f"Prefill time of `snapkv ask` ({ran} at budget {report['args']['budget']}, "
            f"{report['args']['length']:,} tokens, fresh processes) against plain transformers",
            f"{100 * (default['wall_vs_plain_median'] - 1):+.1f}%",
            f"{100 * (min(rounds) - 1):+.1f}% to {100 * (max(rounds) - 1):+.1f}% (each of {len(rounds)} rounds)",
            ("prefill",), (path,))


def _glance_niah(path: str, method: str, budgets: tuple[int, ...], step: str) -> tuple:
    from snapkv_cli.bench.niah import outcomes_from_json
    from snapkv_cli.bench.retention import wilson_interval

    outcomes = outcomes_from_json(_load(path))
    kept, full_exact = _niah_kept(outcomes)
    lengths = sorted({o.length for o in outcomes})
    name = _method_name(method)
    return (f"Needle In A Haystack ({lengths[0] // 1024}k-{lengths[-1] // 1024}k tokens x "
            f"{len({o.depth for o in outcomes})} depths): the full cache's exact cells {name} answers exactly, of "
            f"those it compressed (a prompt no longer than the budget is kept whole)",
            "; ".join(f"{budget}: {_kept_text(kept[(method, budget)], full_exact, ' / ')}" for budget in budgets),
            "; ".join(f"{budget}: {_percent_interval(wilson_interval(*kept[(method, budget)]))}"
                      for budget in budgets), (step,), (path,))


def _glance_long_memory() -> tuple:
    path = "results/long_memory.json"
    report = _load(path)
    longest = max(run["length"] for run in report["runs"])
    run = min((run for run in report["runs"] if run["length"] == longest), key=lambda run: run["peak"])
    return (f"Peak RSS of a {longest:,}-token prefill ({report['args']['model']}, SnapKV at budget 1024, prefill "
            f"chunks of {run['chunk']:,})", f"{run['peak'] / 2**20:,.0f} MiB", "- (one run)", ("longmem",), (path,))


def _glance_peers() -> tuple:
    path = "results/peers/peers.json"
    report = _load(path)
    same = [row for row in _peers_agreement(report) if row[0] == "snapkv-cli snapkv avgpool"]
    version = report["kvpress_environment"]["kvpress"]
    return (f"SnapKV (`--method snapkv --pooling avgpool`, not the default method): identical answers to kvpress "
            f"{version}'s `SnapKVPress` at the same settings (window, kernel, average pooling), NIAH and accuracy "
            f"prompts", "; ".join(f"{budget}: {answers} / {prompts}"
                                                              for _, _, budget, answers, _, prompts in same),
            "-", ("peers",), (path,))


def _commits(paths: tuple[str, ...]) -> str:
    """The commits the JSONs ran at, in the order of their runs (marked where the tree had uncommitted changes)."""
    runs = sorted((_load(path)["provenance"] for path in paths), key=lambda source: source["started"])
    commits = list(dict.fromkeys(f"`{(source['git'].get('commit') or 'unknown')[:10]}`"
                                 + (" (uncommitted changes)" if source["git"].get("dirty") else "") for source in runs))
    if len(commits) <= 2:
        return ", ".join(commits)
    return f"{len(commits)} commits, {commits[0]} to {commits[-1]}"


def _command(steps: tuple[str, ...]) -> str:
    script = RUN_BENCHMARKS.read_text(encoding="utf-8")
    for step in steps:
        assert re.search(rf"^{step}\(\) \{{", script, re.M), f"run_benchmarks.sh has no step {step}"
    return f"`bash benchmarks/run_benchmarks.sh {' '.join(steps)}`"


def at_a_glance() -> str:
    """The page's headline claims, one row each: what, the number, its interval, the command and the commit, every
    number computed from the JSON by the same helpers as the sections' own blocks."""
    _check_default_label()
    rows = [_glance_default_retention(budget) for budget in (128, 256, 1024)]
    rows += [_glance_snapkv_headline(), _glance_decode(), _glance_kv(), _glance_prefill(),
             _glance_niah("results/niah/niah_causal.json", DEFAULT_METHOD, (128, 256, 1024), "niahbeyond"),
             _glance_niah("results/niah/niah.json", "snapkv", (256, 1024), "niah"),
             _glance_long_memory(), _glance_peers()]
    return _table((["what", "number", "interval", "command", "commit"],
                   [[what, number, interval, _command(steps), _commits(paths)]
                    for what, number, interval, steps, paths in rows]))


def report_panel(path: str) -> str:
    """The report panel of a committed answer's JSON (``benchmarks.quickstart_report``), drawn by the CLI's own view
    at 88 columns without colour, and where it ran."""
    from types import SimpleNamespace

    from rich.console import Console

    from snapkv_cli.cli.report_view import render_report

    def namespace(value):
        if isinstance(value, dict):
            return SimpleNamespace(**{key: namespace(item) for key, item in value.items()})
        return [namespace(item) for item in value] if isinstance(value, list) else value

    stored = _load(path)
    console = Console(width=88, record=True, color_system=None, force_terminal=False, file=io.StringIO())
    render_report(namespace(stored["report"]), console)
    machine = stored["provenance"]["machine"]
    return (f"```\n{console.export_text().rstrip()}\n```\n\n(`{stored['run']}` on a {machine['cpus']}-core "
            f"{machine['cpu']}, torch {machine['torch']}, commit `{stored['provenance']['git']['commit'][:10]}`.)\n")


GENERATORS = {
    "at-a-glance": at_a_glance,
    "methods-table": methods_table,
    "report-panel": report_panel,
    "multi-question-speed": multi_question_speed,
    "multi-question-facts": multi_question_facts,
    "multi-question-runs": multi_question_runs,
    "multi-question-dtype-readme": multi_question_dtype_readme,
    "multi-question-per-question": multi_question_per_question,
    "multi-question-dtype": multi_question_dtype,
    "chunked-prefill": chunked_prefill,
    "accuracy-table": accuracy_table,
    "accuracy-by-length": accuracy_by_length,
    "prompt-ranges": prompt_ranges,
    "speed-table": speed_table,
    "speed-comparisons": speed_comparisons,
    "speed-headline": speed_headline,
    "provenance": provenance,
    "accuracy-headline": accuracy_headline,
    "seed-comparison": seed_comparison,
    "retention-pooled": retention_pooled,
    "inspect-found": inspect_found,
    "defaults-table": defaults_table,
    "niah-table": niah_table,
    "peers-table": peers_table,
    "peers-default-table": peers_default_table,
    "llamacpp-table": llamacpp_table,
    "decode-weights-sentence": decode_weights_sentence,
    "decode-weights-retention": decode_weights_retention,
    "decode-step-profile": decode_step_profile_table,
    "dtype-retention": dtype_retention,
    "default-rule": default_rule_table,
    "default-readme": default_readme,
    "decode-speed": decode_speed,
    "batch-table": batch_table,
    "batch-readme": batch_readme,
    "prefill-table": prefill_table,
    "long-memory-table": long_memory_table,
    "long-cost-table": long_cost_table,
    "long-document": long_document,
    "niah-answers": niah_answers,
    "niah-kept": niah_kept,
    "decode-profile": decode_profile,
    "methods-timing": methods_timing,
    "weight-dtype-table": weight_dtype_table,
    "kernel-probe": kernel_probe_table,
    "selection-cost": selection_cost,
    "selection-cost-questions": selection_cost_questions,
    # docs/usage.md: the command line and the --json schemas, from the Typer app and the typed report
    # docs/testing.md: what each mutation group mutates and which tests it runs, from benchmarks/mutation.py
    "mutation-groups": mutation.groups_table,
    "usage-index": usage_doc.command_index,
    "usage-commands": usage_doc.command_reference,
    "json-schema": usage_doc.json_schema,
}


# Generators that take several JSONs and can show the ones committed so far (the missing ones named below them).
PARTIAL = {"accuracy-table", "accuracy-by-length", "prompt-ranges", "accuracy-headline", "provenance"}


def _is_data(argument: str) -> bool:
    """A JSON file or a folder of them (relative to ``docs/``), not a length, budget or option."""
    return argument.endswith(".json") or argument.startswith("results/")


def _committed(argument: str) -> bool:
    path = DOCS / argument
    return path.is_file() if argument.endswith(".json") else any(path.glob("*.json"))


def not_run(missing: list[str], partial: bool = False) -> str:
    """What a block says while its run has not been done: no numbers, the JSON it waits for (``partial``: the numbers
    above it come from the JSONs that are committed)."""
    names = ", ".join(f"`{name}`" for name in missing)
    one = len(missing) == 1
    what = "the numbers above come only from the JSON that is" if partial else "so there are no numbers here"
    return (f"*Not run yet: {names} {'is' if one else 'are'} not committed, {what}. The commands above (all in "
            f"`benchmarks/run_benchmarks.sh`) write {'it' if one else 'them'}; `python -m benchmarks.tables "
            f"--write` then fills this in.*\n")


def render_block(spec: str) -> str:
    """The block's Markdown from the committed JSON; where a JSON is missing, :func:`not_run` says so (a generator
    of several JSONs shows those committed, then names the missing ones)."""
    name, *arguments = spec.split()
    missing = [argument for argument in arguments if _is_data(argument) and not _committed(argument)]
    if not missing:
        return GENERATORS[name](*arguments)
    present = [argument for argument in arguments if argument not in missing]
    if name in PARTIAL and any(_is_data(argument) for argument in present):
        return GENERATORS[name](*present) + "\n" + not_run(missing, partial=True)
    return not_run(missing)


# The schema versions a results JSON of each kind may have (2 for any kind not named): the peers bench's rows record
# their method and settings from version 3 on, and its readers still take version 2's rows (as the SnapKV they ran).
SCHEMA_VERSIONS = {"peers": (2, 3)}


def stored_summaries_mismatches() -> list[str]:
    """Every JSON's stored summaries against a recomputation from its raw records."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, summary_rows
    from snapkv_cli.bench.speed import compare, summarize

    problems = []
    for path in sorted(DOCS.glob("results/**/*.json")):
        if path.parent.name == "mutation":  # benchmarks/mutation.py's results: counts of mutants, no bench summaries
            continue
        report = json.loads(path.read_text(encoding="utf-8"))
        if path.parent.name == "inspect":  # `snapkv inspect --json` (its own schema, version 1), no bench summaries
            if report.get("schema_version") != 1:
                problems.append(f"{path.relative_to(ROOT)}: inspect schema_version {report.get('schema_version')}")
            continue
        versions = SCHEMA_VERSIONS.get(report.get("kind"), (2,))
        if report.get("schema_version") not in versions:
            problems.append(f"{path.relative_to(ROOT)}: schema_version {report.get('schema_version')}, not "
                            f"{' or '.join(map(str, versions))}")
            continue
        if report["kind"] == "accuracy":
            outcomes = outcomes_from_json(report)
            if report["cells"] != summary_rows(outcomes) or report["by_length"] != summary_rows(outcomes,
                                                                                                  pool_tasks=True):
                problems.append(f"{path.relative_to(ROOT)}: stored cells differ from the outcomes")
        elif report["kind"] == "niah":
            from snapkv_cli.bench.niah import outcomes_from_json as niah_outcomes
            from snapkv_cli.bench.niah import summary_rows as niah_rows

            outcomes = niah_outcomes(report)
            if report["cells"] != niah_rows(outcomes) or report["overall"] != niah_rows(outcomes, pooled=True):
                problems.append(f"{path.relative_to(ROOT)}: stored cells differ from the outcomes")
        elif report["kind"] == "speed" and (report["summary"] != summarize(report["samples"])
                                            or report["comparisons"] != compare(report["samples"])):
            problems.append(f"{path.relative_to(ROOT)}: stored summary differs from the samples")
    return problems


def process(write: bool) -> list[str]:
    """Rewrite (``write``) or compare every generated block; returns the blocks that differed."""
    differing = []
    for file in FILES:
        text = file.read_text(encoding="utf-8")

        def replace(match: re.Match, name: str = str(file.relative_to(ROOT))) -> str:
            expected = render_block(match["spec"])
            if match["body"] != expected:
                differing.append(f"{name}: {match['spec']}")
            return match["start"] + expected + match["end"]

        updated = BLOCK.sub(replace, text)
        if write and updated != text:
            file.write_text(updated, encoding="utf-8")
    return differing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 if any block or stored summary differs")
    mode.add_argument("--write", action="store_true", help="rewrite the blocks from the JSON")
    options = parser.parse_args()
    differing = process(write=options.write)
    problems = stored_summaries_mismatches()
    for line in problems + ([] if options.write else [f"{line}: differs from its JSON" for line in differing]):
        print(line, file=sys.stderr)
    if options.write:
        print(f"rewrote {len(differing)} block(s)", file=sys.stderr)
    return 1 if problems or (differing and not options.write) else 0


if __name__ == "__main__":
    sys.exit(main())
