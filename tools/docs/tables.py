"""Regenerate, or check, every benchmark table and every number in the docs' sentences from the committed raw JSON
(and the README's table of methods from the method registry, docs/usage.md's commands, options and JSON schemas from
the Typer app and the typed report: :mod:`tools.docs.usage_doc`).

Tables are blocks in the Markdown files::

    <!-- generated: speed-table results/speed.json -->
    ...whatever this script wrote...
    <!-- end generated -->

The first word names a generator of ``GENERATORS``, the rest its arguments (paths relative to ``docs/``).

The sentences are written in the Markdown; a number in one is an inline value, on one line::

    decode is <!-- value: speed.decode-vs-plain results/speed.json 8192 1024 -->2.22x (...)<!-- end --> that of ...

``speed.decode-vs-plain`` names a facts function of ``FACTS`` (``speed``) and the fact it returns
(``decode-vs-plain``); the rest are the function's arguments. ``--write`` rewrites the text between the markers,
``--check`` fails where it differs, as for blocks.

Each generator and facts function recomputes its numbers from the raw records of the JSON (accuracy ``outcomes``,
speed ``samples``), never from the summaries stored beside them; ``--check`` also checks those stored summaries
against the recomputation. A block or value whose JSON is not committed yet says so in words (:func:`not_run`),
never with numbers from an older run.

    .venv/bin/python -m tools.docs.tables --write   # after a new run: rewrite the blocks
    .venv/bin/python -m tools.docs.tables --check   # exit 1 and list every block or summary that differs

``tests/test_docs_tables.py`` runs the check, so a table that no longer follows from its JSON fails the tests.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys

from tools import ROOT
from tools.bench import default_rule, dtype_accuracy, long_cost_bench, mutation, prefill_bench
from tools.bench import methods_timing as methods_timing_script
from tools.bench import selection_cost as selection_cost_script
from tools.bench.peers import llamacpp_bench, peers_bench
from tools.docs import usage_doc

DOCS = ROOT / "docs"
FILES = (DOCS / "benchmarks.md", ROOT / "README.md", DOCS / "guide.md", DOCS / "usage.md", DOCS / "methods.md",
         DOCS / "multi_question.md", DOCS / "peers.md", DOCS / "batch.md", DOCS / "testing.md",
         *sorted((DOCS / "decisions").glob("*.md")))
BLOCK = re.compile(r"^(?P<start>(?P<indent>[ \t]*)<!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)"
                   r"^(?P<end>(?P=indent)<!-- end generated -->)", re.S | re.M)
VALUE = re.compile(r"(?P<start><!-- value: (?P<spec>[^>]*?) -->)(?P<body>[^<\n]*)(?P<end><!-- end -->)")


def _load(name: str) -> dict:
    return json.loads((DOCS / name).read_text(encoding="utf-8"))


def _table(rows) -> str:
    from snapkv_cli.bench.render import markdown_table

    return markdown_table(*rows)


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


def provenance(*paths: str) -> str:
    """Per JSON: the command that wrote it, its commit, when it ran, the machine and libraries, the load around it."""
    rows = []
    for path in paths:
        source = _load(path)["provenance"]
        machine = source["machine"]
        rows.append([f"`{path}`", f"`{source['command']}`", _commit(source),
                     f"{source['started'][:16].replace('T', ' ')} to {source['finished'][11:16]}",
                     f"{machine['cpus']} ({machine['cpu']})", f"{machine['torch']} ({machine['torch_threads']})",
                     machine["transformers"],
                     f"{source['load_average_before'][0]:.1f} / {source['load_average_after'][0]:.1f}"])
    return _table((["JSON", "command", "commit", "ran (UTC)", "CPUs", "torch (threads)", "transformers",
                    "load average before / after"], rows))


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
    """The exact answers per method, budget and length, recomputed from the outcomes (the headline figure beside it
    is drawn from the same JSON by ``tools/docs/niah_figure.py``)."""
    from snapkv_cli.bench.niah import outcomes_from_json
    from snapkv_cli.bench.niah_render import niah_rows

    return _table(niah_rows(outcomes_from_json(_load(path))))


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
    return _table((["way", "wall time", f"per question (wall / {questions})", "a worker's time per answer",
                    "speed-up"], rows))


def long_memory_table(path: str) -> str:
    """``tools/bench/long_memory_bench.py``: where a long prefill's peak RSS comes from, per length and prefill chunk."""
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
    """``tools/bench/long_cost_bench.py``: cost against prompt length, every run, and the growth exponents."""
    return long_cost_bench.markdown(_load(path)["runs"])


def methods_timing(path: str) -> str:
    """``tools/bench/methods_timing.py``: every method's prefill, selection and decode next to SnapKV's, recomputed from
    the runs."""
    return methods_timing_script.markdown(methods_timing_script.summarize(_load(path)["runs"]))


def selection_cost(path: str) -> str:
    """``tools/bench/selection_cost.py``: every method's selection seconds and share of its one-pass prefill, per
    prompt length and threads, recomputed from the runs."""
    return selection_cost_script.markdown(_load(path))


def selection_cost_questions(path: str) -> str:
    """``tools/bench/selection_cost.py``: what each question on a shared document prefix costs, recomputed."""
    return selection_cost_script.questions_markdown(_load(path))


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


def peers_table(path: str) -> str:
    """snapkv-cli against kvpress and plain transformers on the same prompts, per system and budget, recomputed from
    every answer."""
    return peers_bench.markdown_summary(peers_bench.rows_of(_load(path)))


def peers_agreement(path: str) -> str:
    """snapkv-cli's configurations against their peers on the same prompts, answer by answer."""
    report = _load(path)
    return _agreement_table(peers_bench.rows_of(report), [((mine, budget), (theirs, budget))
                                                          for mine, theirs, budget, *_ in _peers_agreement(report)])


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


def peers_default_held(path: str) -> str:
    """How many of the full cache's right answers (exact NIAH cells, right accuracy samples) the CLI's default method
    and kvpress's nearest press each kept, per budget."""
    rows = peers_bench.rows_of(_load(path))
    budgets = sorted({row["budget"] for row in rows if row["budget"]})
    full_right = [row["prompt"] for row in rows if row["label"] == "snapkv-cli full" and row["correct"]]
    kinds = {row["prompt"]: row["kind"] for row in rows}
    full_niah = [p for p in full_right if kinds[p] == "niah"]
    full_accuracy = [p for p in full_right if kinds[p] == "accuracy"]
    return _table((["system", "budget", f"of the full cache's {len(full_niah)} exact NIAH cells",
                    f"of its {len(full_accuracy)} right accuracy samples"],
                   [[label, str(budget), str(_held(rows, label, budget, full_niah)),
                     str(_held(rows, label, budget, full_accuracy))]
                    for budget in budgets for label in ("snapkv-cli default", "kvpress-nearest")]))


def peers_default_agreement(path: str) -> str:
    """The CLI's default method against kvpress's nearest press and the full cache, answer by answer, with the
    prompts only one side answered right."""
    rows = peers_bench.rows_of(_load(path))
    budgets = sorted({row["budget"] for row in rows if row["budget"]})
    pairs = [(("snapkv-cli default", budget), (theirs, budget if theirs != "snapkv-cli full" else None))
             for budget in budgets for theirs in ("kvpress-nearest", "snapkv-cli full")]
    return _agreement_table(rows, pairs, sides=True)


def llamacpp_table(path: str) -> str:
    """snapkv-cli next to llama.cpp on the same GGUF and prompt ids, recomputed from every run (fresh processes)."""
    report = _load(path)
    return llamacpp_bench.markdown(llamacpp_bench.summarize(report["runs"]), report["args"]["model"])


def dtype_retention(folder: str, *niah_reference: str, candidate: str = "bfloat16",
                    header: str = "float32's right answers kept in bfloat16") -> str:
    """What bfloat16 weights (or another ``candidate`` run of the folder) keep of float32's right answers (bench test
    split) and exact needle cells, paired; a candidate without a needle run says so in its needle column."""
    summary = dtype_accuracy.summarize(DOCS / folder, "float32", candidate, [DOCS / path for path in niah_reference])
    niah_rows = summary["niah"]["by_label"] if "niah" in summary else None
    rows = []
    for label, row in summary["accuracy"]["by_label"].items():
        niah = (niah_rows or {}).get(label, {})
        rows.append([label, f"{row['kept']} / {row['reference_correct']}", _interval(row["retention_interval"]),
                     f"+{row['gained']} -{row['lost']}", f"{row['same_answer']} / {row['pairs']}",
                     "not run" if niah_rows is None else
                     f"{niah.get('kept', '-')} / {niah.get('reference_exact', '-')}"])
    total = summary["accuracy"]["pooled"]
    if "docqa" in summary:
        questions = summary["docqa"]
        rows.append(["of which questions about real documents (docqa)",
                     f"{questions['kept']} / {questions['reference_correct']}",
                     _interval(questions["retention_interval"]), f"+{questions['gained']} -{questions['lost']}", "",
                     ""])
    rows.append(["all", f"{total['kept']} / {total['reference_correct']} ({100 * total['retention']:.1f}%)",
                 _interval(total["retention_interval"]), f"+{total['gained']} -{total['lost']}", "",
                 "not run" if niah_rows is None else f"{summary['niah']['lost_cells']} lost"])
    return _table((["method", header, "interval", "gained / lost", "identical answers", "exact needle cells kept"],
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
    summary = dtype_accuracy.summarize(DOCS / folder, "float32", candidate)
    total, rows = summary["accuracy"]["pooled"], summary["accuracy"]["by_label"].values()
    return {"kept": f"{total['kept']} of {total['reference_correct']}", "share": f"{100 * total['retention']:.1f}%",
            "lost": str(total["lost"]), "gained": str(total["gained"]),
            "identical": f"{sum(row['same_answer'] for row in rows)} of {sum(row['pairs'] for row in rows)}"}


def decode_int4_retention_facts(folder: str) -> dict[str, str]:
    """:func:`decode_weights_retention_facts` of the folder's ``decode-int4`` runs."""
    return decode_weights_retention_facts(folder, "decode-int4")


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
    return _table((["candidate", "budget", "full cache's right answers kept", "of which docqa",
                    "against the best (95% interval)", "needle cells lost", "prefill / SnapKV's (8k, 1024)"], rows))


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
    """``tools/bench/prefill_bench.py``: each variant's prefill in fresh processes, medians and the per-round ratio to
    plain transformers (wall and CPU time), recomputed from the runs."""
    report = _load(path)
    summary = prefill_bench.summarize(report["runs"])
    methods = {run["variant"]: run.get("method") for run in report["runs"]}
    rows = []
    for variant, row in summary.items():
        if variant == "memory_target":
            continue
        per_round = ", ".join(_change(ratio) for ratio in row["wall_vs_plain_per_round"])
        rows.append([f"`{variant}`", f"`{methods[variant]}`" if methods[variant] else "-", f"{row['wall_s']:.2f}",
                     f"{row['selection_s']:.2f}", _change(row["wall_vs_plain_median"]), per_round,
                     _change(row["cpu_vs_plain_median"]), f"{row['sys_s']:.2f}",
                     f"{row['minor_faults'] / 1e6:.2f}", f"{row['peak_rss_bytes'] / 2**20:.0f}",
                     f"{row['kv_bytes'] / 2**20:.1f}"])
    return _table((["variant", "method", "wall s", "of which selection s", "wall vs plain (median)",
                    "wall vs plain, each round", "CPU vs plain", "sys s", "minor faults (M)", "peak RSS MiB",
                    "KV MiB"], rows))


def weight_dtype_table(path: str) -> str:
    """``tools/probes/weight_dtype_bench.py``: each weight variant's prefill and decode speed, their ratios to float32
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


KERNEL_VARIANTS = {"float32": "float32", "bf16_onednn": "bf16, oneDNN on", "bf16_no_onednn": "bf16, oneDNN off",
                   "int8_bf16": "int8 op, bf16 x", "int8_f32": "int8 op, float32 x", "int4_bf16": "int4 op, bf16 x",
                   "int4_f32": "int4 op, float32 x"}
COMPILED_VARIANTS = {"float32": "float32", "bf16": "bf16", "float32_compiled": "float32, compiled",
                     "bf16_compiled": "bf16, compiled", "float32_autotune": "float32, compiled, max-autotune",
                     "float32_autotune_unfrozen": "float32, max-autotune, not frozen",
                     "float32_cpp_template": "float32, C++ template only"}


def kernel_probe_table(path: str) -> str:
    """``tools/probes/kernel_probe.py`` (or ``tools/probes/compiled_probe.py``): each product's milliseconds per call per kernel
    (median of the rounds) and its speed against float32 within each round (median, min-max); the one-token
    products first, then prefill-size ones; a kernel that did not compile, its error."""
    report = _load(path)
    variants = COMPILED_VARIANTS if report["kind"] == "compiled_probe" else KERNEL_VARIANTS

    def cell(shape: str, row: dict, variant: str) -> str:
        if variant not in row:
            return f"did not compile: {report['failed'][shape][variant]}" if variant in report.get(
                "failed", {}).get(shape, {}) else ""
        value = row[variant]
        if variant == "float32":
            return f"{value['ms_median']:.3g} ms"
        return (f"{value['ms_median']:.3g} ms, x{value['speedup_vs_float32_median']:.2f} "
                f"({value['speedup_vs_float32_min']:.2f}-{value['speedup_vs_float32_max']:.2f})")

    rows = [[f"`{shape}`", *[cell(shape, row, variant) for variant in variants]]
            for block in ("decode", "prefill") for shape, row in report.get(block, {}).items()]
    return _table((["product (x @ W.T)", *variants.values()], rows))


def decode_step_profile_table(path: str) -> str:
    """``tools/probes/decode_step_profile.py``: the ops that take a decoding step's time, float32 against bfloat16 steps
    (torch.profiler, self CPU time per step): the six largest in either, and all ops."""
    report = _load(path)
    profiles = report["profiles"]
    ops: dict[str, dict] = {}
    for name, profile in profiles.items():
        for op in profile["ops"]:
            ops.setdefault(op["op"], {})[name] = op["self_ms_per_step"]
    top = sorted(ops, key=lambda op: -max(ops[op].values()))[:6]
    rows = [[f"`{op}`", *[f"{ops[op][name]:.1f}" if name in ops[op] else "-" for name in profiles]] for op in top]
    rows.append(["all ops (self CPU time)", *[f"{profile['self_cpu_ms_per_step']:.1f}" for profile in
                                             profiles.values()]])
    return _table((["op (ms per step)", *profiles], rows))


def selection_threads_table(path: str) -> str:
    """``tools/probes/selection_threads.py``: the default method's whole selection step per way of choosing its threads,
    idle and with busy jobs beside it: seconds per round, what it ran on, and whether it kept the same positions."""
    report = _load(path)
    cells: dict[tuple[int, str], list[dict]] = {}
    for run in report["runs"]:
        cells.setdefault((run["busy_jobs"], run["mode"]), []).append(run)
    rows = [[f"{busy} busy one-thread jobs" if busy else "idle", mode,
             ", ".join(f"{run['selection_s']:.2f}" for run in runs),
             ", ".join(sorted({run["ran_on"] for run in runs})),
             "yes" if all(run["same_kept"] for run in runs) else "no"]
            for (busy, mode), runs in cells.items()]
    return _table((["CPU", "threads", "seconds, each round", "ran on", "same kept positions"], rows))


def compiled_decode_table(path: str) -> str:
    """``tools/probes/compiled_decode_probe.py``: per compiled variant and inductor cache, its compile time, step times
    (median of the rounds) next to the eager steps of the same process, its speed against the eager bfloat16 steps
    (median, min-max of the rounds) and whether it chose the eager steps' tokens."""
    import statistics

    report = _load(path)
    rows = []
    for run in report["runs"]:
        variant = run["variant"]
        median = {name: statistics.median(r[name] for r in run["rounds"]) for name in ("float32", "bf16", variant)}
        ratios = [r[f"{variant}_vs_bf16"] for r in run["rounds"]]
        rows.append([f"`{variant}`", run["inductor_cache"], f"{run['compile_s']:.0f} s",
                     f"{median['float32']:.1f}", f"{median['bf16']:.1f}", f"{median[variant]:.1f}",
                     f"{_times(statistics.median(ratios))} ({_span(min(ratios), max(ratios))})",
                     "yes" if run["same_tokens_as_eager"] else "no"])
    return _table((["compiled variant", "inductor cache", "compiling", "eager float32 ms", "eager bf16 ms",
                    "compiled ms", "vs eager bf16", "same tokens"], rows))


def decode_step_variants_table(path: str) -> str:
    """``tools/probes/decode_step_variants.py``: per variant of a decoding step, its milliseconds per step (median of the
    rounds), its speed against the bfloat16 steps (median, min-max of the paired rounds), its three costliest ops
    (self CPU milliseconds per step) and whether one step from the same cache chose float32's token."""
    report = _load(path)
    rows = []
    for variant, summary in report["summary"].items():
        ops = report["profiles"][variant]["ops"][:3]
        agreement = report["agreement"].get(variant)
        rows.append([f"`{variant}`", f"{summary['ms_median']:.1f}",
                     f"{_times(summary['vs_bf16_median'])} ({_span(summary['vs_bf16_min'], summary['vs_bf16_max'])})",
                     ", ".join(f"`{op['op'].removeprefix('aten::')}` {op['self_ms_per_step']:.1f}" for op in ops),
                     "-" if agreement is None else ("yes" if agreement["same_token_as_float32"] else "no")])
    return _table((["decoding step", "ms per step", "vs bf16 steps", "costliest ops (ms per step)",
                    "float32's token"], rows))


def methods_table() -> str:
    """The README's table of methods, from the method registry (:mod:`snapkv_cli.engine.methods`)."""
    from snapkv_cli.engine.methods import METHODS
    from snapkv_cli.engine.settings import with_defaults

    return _table((["method", "paper", "what each layer and KV head keeps"],
                   [[f"`{method.name}`", method.paper, with_defaults(method.keeps)] for method in METHODS.values()]))


# -- the default method's bench label and its test runs -----------------------------------------------------------

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


def _check_default_label() -> None:
    """The facts that speak of "the default method" read its bench label: it must still be what the CLI runs."""
    from snapkv_cli import defaults
    from snapkv_cli.bench.grid import parse_label

    assert parse_label(DEFAULT_METHOD) == (defaults.METHOD, defaults.METHOD_SETTINGS), \
        f"{DEFAULT_METHOD} is no longer the CLI's default method: rerun its benchmarks or relabel these rows"


def report_panel(path: str) -> str:
    """The report panel of a committed answer's JSON (``tools.docs.quickstart_report``), drawn by the CLI's own view
    at 88 columns without colour."""
    from types import SimpleNamespace

    from rich.console import Console

    from snapkv_cli.views.report_panel import render_report

    def namespace(value):
        if isinstance(value, dict):
            return SimpleNamespace(**{key: namespace(item) for key, item in value.items()})
        return [namespace(item) for item in value] if isinstance(value, list) else value

    stored = _load(path)
    console = Console(width=88, record=True, color_system=None, force_terminal=False, file=io.StringIO())
    render_report(namespace(stored["report"]), console)
    return f"```\n{console.export_text().rstrip()}\n```\n"



# -- facts: the numbers a sentence of the docs names inline, each function one JSON's (or one run's) facts by key --

def _times(value: float) -> str:
    return f"{value:.2f}x"


def _change(value: float) -> str:
    """A ratio as the percentage it adds or takes away (1.196 -> +19.6%)."""
    return f"{100 * (value - 1):+.1f}%"


def _spread(spread: dict, percent: bool = False) -> str:
    """The interquartile range of a paired ratio (``percent``: of an overhead, already a fraction)."""
    if percent:
        return f"{100 * spread['q1']:+.1f}% to {100 * spread['q3']:+.1f}%"
    return f"{spread['q1']:.2f}-{spread['q3']:.2f}x"


def _median(spread: dict, percent: bool = False) -> str:
    """The median of a paired ratio (``percent``: of an overhead, already a fraction)."""
    return f"{100 * spread['median']:+.1f}%" if percent else _times(spread["median"])


def _ratio(spread: dict, percent: bool = False) -> str:
    """A paired ratio's median with its interquartile range: ``2.22x (interquartile range 2.14-2.85x)``."""
    return f"{_median(spread, percent)} (interquartile range {_spread(spread, percent)})"


def _ratio_facts(name: str, spread: dict, percent: bool = False) -> dict[str, str]:
    """A ratio's facts: the median with its range (``name``), the median alone and the range alone."""
    return {name: _ratio(spread, percent), f"{name}-median": _median(spread, percent),
            f"{name}-range": _spread(spread, percent)}


def _interval(interval: tuple[float, float] | None) -> str:
    """A Wilson 95% interval of a share: ``95% CI 77-97%``."""
    return "-" if interval is None else f"95% CI {100 * interval[0]:.0f}-{100 * interval[1]:.0f}%"


def _commit(source: dict) -> str:
    """The commit a JSON's provenance records (marked where the tree had uncommitted changes)."""
    git = source["git"]
    return f"`{(git.get('commit') or 'unknown')[:10]}`" + (" (uncommitted changes)" if git.get("dirty") else "")


def _commits(paths: tuple[str, ...]) -> str:
    """The commits the JSONs ran at, in the order of their runs (marked where the tree had uncommitted changes)."""
    runs = sorted((_load(path)["provenance"] for path in paths), key=lambda source: source["started"])
    commits = list(dict.fromkeys(_commit(source) for source in runs))
    if len(commits) <= 2:
        return ", ".join(commits)
    return f"{len(commits)} commits, {commits[0]} to {commits[-1]}"


def _retention_facts(prefix: str, counts) -> dict[str, str]:
    """Kept / full-correct pairs (``prefix-kept``), the share with its interval (``prefix-retention``) and the interval
    alone (``prefix-interval``)."""
    return {f"{prefix}-kept": f"{counts.kept} / {counts.full_correct} ({100 * counts.retention:.1f}%)",
            f"{prefix}-retention": f"{100 * counts.retention:.0f}% ({_interval(counts.retention_interval)})",
            f"{prefix}-interval": _interval(counts.retention_interval)}


def accuracy_facts(*paths: str) -> dict[str, str]:
    """The full cache's accuracy at each length (``full-4k``: right / samples with the interval) and every budget's
    retention (``snapkv-1024-4k-kept``, ``-retention``, ``-interval``); ``commits``."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    facts = {"commits": _commits(paths)}
    tallies = tally(outcomes_from_json(_accuracy(paths)), pool_tasks=True)
    for (_, length, method, budget), counts in tallies.items():
        if method == "full":
            facts[f"full-{length // 1024}k"] = (f"{counts.correct}/{counts.samples} ({100 * counts.accuracy:.0f}%, "
                                                 f"{_interval(counts.accuracy_interval)})")
        elif counts.retention is not None:
            facts |= _retention_facts(f"{method}-{budget}-{length // 1024}k", counts)
    return facts


def default_test_facts() -> dict[str, str]:
    """The default method's retention pooled over every test pair at 4k-8k (:data:`DEFAULT_TEST_PAIRS`) per budget
    (``128-kept``, ``128-interval`` ...) and the commits those runs ran at."""
    _check_default_label()
    facts = {"commits": _commits(DEFAULT_TEST_PAIRS)}
    for (method, budget), counts in _pooled_retention(DEFAULT_TEST_PAIRS).items():
        if method == DEFAULT_METHOD and counts.retention is not None:
            facts |= _retention_facts(str(budget), counts)
    return facts


def speed_facts(path: str, length: str, budget: str) -> dict[str, str]:
    """The speed bench at one length and budget: the compressing method's decode rate beside plain transformers',
    this project's uncompressed cache's and the weights-only floor's (medians), the paired ratios (``decode-vs-plain``
    is this project's cache and compression together, ``decode-vs-full`` compression alone), prefill overheads, the
    same at budget 256 (``-256``), KV bytes and peak RSS."""
    _check_default_label()
    length_, budget_ = int(length), int(budget)
    comparisons, summary = _speed(path)
    method = _speed_method(path)
    snap, plain = comparisons[(length_, method, budget_)], comparisons[(length_, "transformers", None)]
    small = comparisons.get((length_, method, 256))

    def median(key: tuple, field: str) -> float:
        return summary[key][field]["median"] if isinstance(summary[key][field], dict) else summary[key][field]

    mine, theirs = (length_, method, budget_), (length_, "transformers", None)
    kv, kv_plain = summary[mine]["kv_bytes"], summary[theirs]["kv_bytes"]
    rss, rss_plain = median(mine, "peak_rss_bytes"), median(theirs, "peak_rss_bytes")
    mib = 2**20
    facts = {
        "method": _method_name(method), "rounds": str(snap["decode_vs_transformers"]["n"]),
        "decode": f"{median(mine, 'decode_tokens_per_s'):.1f}",
        "decode-plain": f"{median(theirs, 'decode_tokens_per_s'):.1f}",
        "decode-full": f"{median((length_, 'full', None), 'decode_tokens_per_s'):.1f}",
        "decode-floor": f"{median((1, 'weights-only', None), 'decode_tokens_per_s'):.1f}",
        "ceiling": _times(1 / plain["decode_vs_weights_only"]["median"]),
        "kv": f"{kv / mib:.1f} MiB", "kv-plain": f"{kv_plain / mib:.1f} MiB", "kv-smaller": f"{kv_plain / kv:.1f}x",
        "rss": f"{rss / mib:.0f} MiB", "rss-plain": f"{rss_plain / mib:.0f} MiB",
        "rss-lower": f"{(rss_plain - rss) / mib:.0f} MiB", "kv-saved": f"{(kv_plain - kv) / mib:.0f} MiB",
        "rss-share": f"{(rss_plain - rss) / (kv_plain - kv):.0%}",
        "commit": _commits((path,)),
    }
    facts |= _ratio_facts("decode-vs-plain", snap["decode_vs_transformers"])
    facts |= _ratio_facts("decode-vs-full", snap["decode_vs_full"])
    facts |= _ratio_facts("decode-vs-floor", snap["decode_vs_weights_only"])
    facts |= _ratio_facts("plain-vs-floor", plain["decode_vs_weights_only"])
    facts |= _ratio_facts("prefill-vs-plain", snap["prefill_overhead_vs_transformers"], percent=True)
    facts |= _ratio_facts("prefill-vs-full", snap["prefill_overhead_vs_full"], percent=True)
    if small is not None:
        facts |= _ratio_facts("decode-vs-plain-256", small["decode_vs_transformers"])
        facts |= _ratio_facts("decode-vs-full-256", small["decode_vs_full"])
    return facts


def prefill_facts(path: str) -> dict[str, str]:
    """``tools/bench/prefill_bench.py`` in fresh processes: per variant (``default``, ``snapkv``) the median wall and
    CPU time against plain transformers, each round's range, its selection's share; the memory target."""
    report = _load(path)
    summary = prefill_bench.summarize(report["runs"])
    methods = {run["variant"]: run.get("method") for run in report["runs"]}
    facts = {"length": f"{report['args']['length']:,}", "budget": str(report["args"]["budget"]),
             "commit": _commits((path,))}
    for variant, row in summary.items():
        if variant == "memory_target":
            facts |= {"rss-below-full": f"{row['peak_rss_below_full'] / 2**20:.0f} MiB",
                      "kv-saved": f"{row['kv_bytes_saved'] / 2**20:.0f} MiB",
                      "memory-share": f"{row['share_of_saved']:.0%}"}
            continue
        rounds = row["wall_vs_plain_per_round"]
        facts |= {f"{variant}-method": _method_ran({"method": methods[variant]}),
                  f"{variant}-wall": _change(row["wall_vs_plain_median"]),
                  f"{variant}-cpu": _change(row["cpu_vs_plain_median"]),
                  f"{variant}-rounds": f"{_change(min(rounds))} to {_change(max(rounds))}",
                  f"{variant}-round-count": str(len(rounds)),
                  f"{variant}-selection": f"{row['selection_s']:.1f} s", f"{variant}-prefill": f"{row['wall_s']:.1f} s",
                  f"{variant}-selection-share": f"{100 * row['selection_s'] / row['wall_s']:.0f}%"}
    return facts


def prefill_pooled_facts(*paths: str) -> dict[str, str]:
    """Several ``tools/bench/prefill_bench.py`` runs of the same variants pooled round by round: per variant the median of
    every round's wall time against plain transformers (``default-wall``), the rounds' range and count."""
    import statistics

    rounds: dict[str, list[float]] = {}
    for path in paths:
        for variant, row in prefill_bench.summarize(_load(path)["runs"]).items():
            if variant != "memory_target":
                rounds.setdefault(variant, []).extend(row["wall_vs_plain_per_round"])
    facts = {}
    for variant, ratios in rounds.items():
        facts |= {f"{variant}-wall": _change(statistics.median(ratios)),
                  f"{variant}-rounds": f"{_change(min(ratios))} to {_change(max(ratios))}",
                  f"{variant}-round-count": str(len(ratios))}
    return facts


def niah_facts(path: str) -> dict[str, str]:
    """A Needle In A Haystack run: its lengths and depths, and per compressed method and budget (the default method
    as ``default``) the full cache's exact cells it answered exactly, of those it compressed (``snapkv-1024-kept``)
    with the interval (``-interval``); the best method besides the full cache and SnapKV (``best-other``)."""
    from snapkv_cli.bench.niah import best_other, outcomes_from_json
    from snapkv_cli.bench.retention import wilson_interval

    outcomes = outcomes_from_json(_load(path))
    kept, full_exact = _niah_kept(outcomes)
    lengths = sorted({o.length for o in outcomes})
    best = best_other(outcomes)
    facts = {"lengths": f"{lengths[0] // 1024}k-{lengths[-1] // 1024}k",
             "depths": str(len({o.depth for o in outcomes})), "commit": _commits((path,)),
             "best-other": "none" if best is None else
             f"{best.method} {best.budget} ({best.exact}/{best.total} exact, partial {best.partial:.2f})"}
    for (method, budget), cells in kept.items():
        name = "default" if method == DEFAULT_METHOD else method
        facts[f"{name}-{budget}-kept"] = _kept_text(cells, full_exact, " / ")
        facts[f"{name}-{budget}-interval"] = _interval(wilson_interval(*cells)) if cells[1] else "-"
    return facts


def long_memory_facts(path: str) -> dict[str, str]:
    """``tools/bench/long_memory_bench.py``: the longest prefill's lowest peak RSS and the chunks it ran in."""
    report = _load(path)
    longest = max(run["length"] for run in report["runs"])
    run = min((run for run in report["runs"] if run["length"] == longest), key=lambda run: run["peak"])
    return {"longest": f"{longest:,}", "model": report["args"]["model"], "chunk": f"{run['chunk']:,}",
            "peak": f"{run['peak'] / 2**20:,.0f} MiB", "commit": _commits((path,))}


def peers_facts(path: str) -> dict[str, str]:
    """The peers bench: both sides' libraries (``torch``, ``kvpress-torch`` ...); snapkv-cli's SnapKV with average
    pooling against kvpress's ``SnapKVPress``, identical answers per budget (``avgpool-256``); where the run has
    them, the CLI's default method's settings (``default``, ``default-settings``) and kvpress's nearest press
    (``nearest``, ``nearest-note``)."""
    report = _load(path)
    theirs, ours = report["kvpress_environment"], report["snapkv_cli"]
    facts = {"torch": ours["torch"], "transformers": ours["transformers"], "kvpress": theirs["kvpress"],
             "kvpress-torch": theirs["torch"], "kvpress-transformers": theirs["transformers"],
             "commit": _commits((path,))}
    rows = peers_bench.rows_of(report)
    if any(row["label"] == "snapkv-cli snapkv avgpool" for row in rows):
        for mine, _, budget, answers, _, prompts in _peers_agreement(report):
            if mine == "snapkv-cli snapkv avgpool":
                facts[f"avgpool-{budget}"] = f"{answers} / {prompts}"
    default = next((row for row in rows if row["label"] == "snapkv-cli default"), None)
    if default is not None:
        settings = default["settings"]
        facts |= {"default": f"`{default['method']}`",
                  "default-settings": f"{settings['method']}, window {settings['window_size']}, kernel "
                                      f"{settings['kernel_size']}, {settings['pooling']}, {settings['pooling_window']} "
                                      f"pooling window, {settings['head_budgets']} heads"}
    nearest = next((row["press"] for row in rows if row["label"] == "kvpress-nearest"), None)
    if nearest is not None:
        facts |= {"nearest": _press_text(nearest), "nearest-note": nearest["nearest_to_note"]}
    return facts


def llamacpp_facts(path: str) -> dict[str, str]:
    """snapkv-cli beside llama.cpp: snapkv-cli's settings, llama-cpp-python's version and vector extensions, the
    GGUF file, the rounds and the load average during the runs; snapkv-cli's median decode rate per prompt length
    and thread count (``decode-8000-1``) where it ran with the weights as loaded."""
    report = _load(path)
    runs = report["runs"]
    theirs = next(run for run in runs if run["tool"] == "llama.cpp")
    settings = sorted({(run["method"], run["budget"], run["dtype"]) for run in runs if run["tool"] == "snapkv-cli"},
                      key=str)
    loads = [run["load_average"][0] for run in runs if run.get("load_average")]
    return {"settings": "; ".join(f"{method}, budget {budget}, {dtype} weights" for method, budget, dtype in settings),
            "llama-cpp-python": theirs["llama_cpp_python"],
            "extensions": ", ".join(llamacpp_bench.vector_extensions(theirs["system_info"])) or "no AVX2",
            "gguf": f"`{report['gguf']['file']}`", "rounds": str(len({run["round"] for run in runs})),
            "load": f"{min(loads):.1f}-{max(loads):.1f}",
            **{f"decode-{row['length']}-{row['threads']}": f"{row['snapkv-cli']['decode_tokens_per_s']['median']:.1f}"
               for row in llamacpp_bench.summarize(runs) if "snapkv-cli" in row}}  # (not in a --decode-weights run)


def _bf16_text(machine: dict) -> str:
    """Whether a run's CPU computes bfloat16 natively, from the vector features its provenance lists."""
    native = [name for name in machine["cpu_features"] if name in ("avx512_bf16", "amx_bf16")]
    return f"native bfloat16 ({', '.join(native)})" if native else "no native bfloat16"


def _machine_facts(source: dict) -> dict[str, str]:
    """Where a run ran, as the user docs say it: its CPUs, vector features, bfloat16, torch and threads, the load
    average before and after, the commit."""
    machine = source["machine"]
    features = [name.upper() for name in machine["cpu_features"]]
    return {"cpus": str(machine["cpus"]),
            "features": " and ".join([", ".join(features[:-1]), features[-1]] if len(features) > 1 else features)
            or "no AVX2",
            "bf16": _bf16_text(machine), "torch": machine["torch"], "threads": str(machine["torch_threads"]),
            "load-before": f"{source['load_average_before'][0]:.1f}",
            "load-after": f"{source['load_average_after'][0]:.1f}", "commit": _commit(source)}


def _span(low: float, high: float) -> str:
    """A range of ratios: ``1.08-4.04x``, or one value where both ends round alike."""
    return _times(low) if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}x"


def decode_weights_facts(path: str, weights: str = "bfloat16", baseline: str = "same") -> dict[str, str]:
    """The llama.cpp peer bench run with ``--decode-weights`` ``baseline`` and ``weights``: over its lengths, the
    paired per-round ratios of the ``weights`` steps to the ``baseline`` ones (``decode-vs-float32`` for the weights
    as loaded, ``decode-vs-bf16`` against bfloat16 steps) and to llama.cpp (``decode-vs-llamacpp``,
    ``prefill-vs-llamacpp``), how many pairs decoded faster than the baseline and gave the first token before
    llama.cpp, the extra peak memory (``rss-more``, negative for less); per length and thread count each tool's
    decode range (``decode-llama.cpp-8000-1``, ``decode-float32-8000-1``) and the ``weights`` steps' decode ratio to
    llama.cpp (``vs-llamacpp-8000-1``, with its range where there are several rounds); the rounds, the load and the
    machine."""
    report = _load(path)
    runs = report["runs"]
    fast, base = llamacpp_bench.snapkv_tool(weights), llamacpp_bench.snapkv_tool(baseline)
    names = {llamacpp_bench.snapkv_tool(value): name for value, name in
             (("same", "float32"), ("bfloat16", "bf16"), ("int4", "int4"))}
    rows = [row for row in llamacpp_bench.summarize(runs) if f"{fast}_over_llamacpp" in row]

    def span(key: str, metric: str) -> str:
        return _span(min(row[key][metric]["min"] for row in rows), max(row[key][metric]["max"] for row in rows))

    def paired(other: str) -> list[tuple[dict, dict]]:
        mine = {(run["length"], run["threads"], run["round"]): run for run in runs if run["tool"] == fast}
        return [(mine[key], run) for run in runs if run["tool"] == other
                and (key := (run["length"], run["threads"], run["round"])) in mine]

    # rounded as the bench's summaries round a ratio (``llamacpp_bench.spread``)
    against = [round(ours["decode_tokens_per_s"] / theirs["decode_tokens_per_s"], 3) for ours, theirs in paired(base)]
    sooner = [ours["ttft_s"] < theirs["ttft_s"] for ours, theirs in paired("llama.cpp")]
    extra = [row[fast]["peak_rss_mb"]["median"] - row[base]["peak_rss_mb"]["median"] for row in rows]
    loads = [run["load_average"][0] for run in runs if run.get("load_average")]
    facts = {"lengths": " and ".join(dict.fromkeys(f"{row['length']:,}" for row in rows)),
             "threads": " and ".join(dict.fromkeys(str(row["threads"]) for row in rows)),
             "rounds": str(len({run["round"] for run in runs})), "load": f"{min(loads):.1f}-{max(loads):.1f}",
             f"decode-vs-{names[base]}": _span(min(against), max(against)),
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
            f"{_times(ratio['median'])} ({_span(ratio['min'], ratio['max'])})" if ratio["n"] > 1
            else _times(ratio["median"]))
    return facts | {key: value for key, value in _machine_facts(report["provenance"]).items()
                    if key in ("cpus", "features", "bf16", "commit")}


def decode_int4_facts(path: str) -> dict[str, str]:
    """:func:`decode_weights_facts` of a run with ``--decode-weights bfloat16 int4``: the int4 steps against the
    bfloat16 ones and llama.cpp."""
    return decode_weights_facts(path, "int4", "bfloat16")


def decode_step_variants_facts(path: str) -> dict[str, str]:
    """``tools/probes/decode_step_variants.py``: the bytes of each decode path's weights (``bf16-bytes``, ``int4-bytes``) and
    the seconds making them took each time (``bf16-attach``), the compile time of the compiled layers, the prompt
    and cache size, the rounds and the machine."""
    report = _load(path)
    names = {"bfloat16": "bf16", "int4": "int4"}
    facts = {"prompt-tokens": f"{report['prompt_tokens']:,}", "cache-positions": f"{report['cache_positions']:,}",
             "rounds": str(report["args"]["rounds"])}
    for weights, path_info in report["decode_paths"].items():
        facts[f"{names[weights]}-bytes"] = f"{path_info['bytes'] / 1e6:.0f} MB"
        times = path_info["attach_s"]
        facts[f"{names[weights]}-attach"] = f"{min(times):.1f}-{max(times):.1f} s"
    if report.get("compile_s") is not None:
        facts["compile"] = f"{report['compile_s']:.0f} s"
    return facts | _machine_facts(report["provenance"])


def kernel_probe_facts(path: str) -> dict[str, str]:
    """``tools/probes/kernel_probe.py``: where it ran (CPUs, vector features, bfloat16, torch, threads, load), its rounds."""
    report = _load(path)
    facts = {"rounds": str(report["args"]["rounds"]), **_machine_facts(report["provenance"])}
    gemma = report["decode"].get("1x640 @ 262144x640.T", {})
    if "int4_bf16" in gemma:  # runs from before the int4 columns have none
        ms = {name: row["ms_median"] for name, row in gemma.items()}
        facts["int4-gemma"] = (
            f"On gemma3-270m's 262,144 x 640 output projection it took {ms['int4_bf16']:.3g} ms with bfloat16 "
            f"activations, against {min(ms['bf16_onednn'], ms['bf16_no_onednn']):.3g} ms for the faster bfloat16 "
            f"kernel and {ms['float32']:.3g} ms in float32 ({ms['int4_f32']:.3g} ms with float32 activations).")
    return facts


def _decode_step_summary(rounds: list[dict]) -> dict:
    """The decode step profile's summary, recomputed from its paired rounds (as ``tools/probes/decode_step_profile.py``
    stores it)."""
    import statistics

    speedups = sorted(row["speedup"] for row in rounds)
    return {"speedup_median": statistics.median(speedups), "speedup_min": speedups[0], "speedup_max": speedups[-1],
            "float32_ms_median": statistics.median(row["float32_ms"] for row in rounds),
            "bf16_ms_median": statistics.median(row["bf16_ms"] for row in rounds)}


def decode_step_profile_facts(path: str) -> dict[str, str]:
    """``tools/probes/decode_step_profile.py``: the prompt and the cache after the steps, the paired rounds' step times and
    speed-up (recomputed from the rounds), the matrix products' and all ops' time against float32 in the profile
    (``mm``, ``all-ops``), the products per step, the bfloat16 copies' bytes, where it ran."""
    report = _load(path)
    summary, profiles = _decode_step_summary(report["rounds"]), report["profiles"]
    mm = {name: next(op for op in profile["ops"] if op["op"] == "aten::mm") for name, profile in profiles.items()}
    every = {name: profile["self_cpu_ms_per_step"] for name, profile in profiles.items()}
    return {"prompt-tokens": f"{report['prompt_tokens']:,}", "cache-positions": f"{report['cache_positions']:,}",
            "rounds": str(len(report["rounds"])), "steps": str(report["args"]["steps"]),
            "float32-ms": f"{summary['float32_ms_median']:.0f} ms", "bf16-ms": f"{summary['bf16_ms_median']:.0f} ms",
            "speedup": _span(summary["speedup_min"], summary["speedup_max"]),
            "speedup-median": _times(summary["speedup_median"]),
            "mm": f"{mm['float32']['self_ms_per_step'] / mm['bf16_steps']['self_ms_per_step']:.1f}x",
            "mm-calls": f"{mm['bf16_steps']['calls_per_step']:.0f}",
            "all-ops": f"{every['float32'] / every['bf16_steps']:.1f}x",
            "copies": f"{report['bf16_copy_bytes'] / 1e6:.0f} MB", **_machine_facts(report["provenance"])}


def methods_timing_facts(path: str) -> dict[str, str]:
    """``tools/bench/methods_timing.py``: the prompt, budget, decoded tokens, rounds and threads, and where it ran."""
    report = _load(path)
    args, where = report["args"], report["provenance"]
    return {"prompt-tokens": f"{report['prompt_tokens']:,}", "budget": str(args["budget"]),
            "new-tokens": str(args["new_tokens"]), "rounds": str(args["rounds"]),
            "threads": str(where["machine"]["torch_threads"]), "commit": _commit(where),
            "load-before": f"{where['load_average_before'][0]:.1f}",
            "load-after": f"{where['load_average_after'][0]:.1f}"}


def quickstart_facts(path: str) -> dict[str, str]:
    """The committed answer the README's panel shows: the command, the machine and the commit it ran at."""
    stored = _load(path)
    machine = stored["provenance"]["machine"]
    return {"run": f"`{stored['run']}`", "cpus": str(machine["cpus"]), "cpu": machine["cpu"],
            "torch": machine["torch"], "commit": _commit(stored["provenance"])}


def multi_question_facts(path: str) -> dict[str, str]:
    """``multi_question_bench.py``: the run (commit, threads, load), the prompt and its prefix, the wall times of
    separate runs, one multi-question run and the document cache's two runs with their speed-ups, each question
    cold and cached, the answers, and the float16 check (``dtype-...``)."""
    report = _load(path)
    git = report.get("git") or {}
    wall, times = report["wall_s"], report["per_question_s"]
    separate = sum(wall["separate_each"])
    ratios = [cold / cached for cold, cached in zip(times["cold"], times["cached"])]
    check = report["dtype_check"]
    same, total = (int(part) for part in check["identical_kept_sets"].split("/"))
    answers = len(check["answers_float32"])
    return {
        "commit": f"`{git['commit'][:10]}`" if git.get("commit") else "a commit the JSON does not record",
        "threads": str(report["threads"]), "max-new-tokens": str(report["max_new_tokens"]),
        "load-before": f"{report['load_average_before'][0]:.1f}",
        "load-after": f"{report['load_average_after'][0]:.1f}",
        "method": _method_ran(report),
        "prompt-tokens": f"{report['prompt_tokens']:,}", "prefix-tokens": f"{report['prefix_tokens']:,}",
        "cache-entry": f"{report['doc_cache_bytes'] / 1e6:.0f} MB", "questions": str(len(times["cold"])),
        "separate": f"{separate:.0f} s", "multi": f"{wall['multi']:.0f} s",
        "multi-speedup": f"{separate / wall['multi']:.1f}x", "cached": f"{wall['cached_second_run']:.1f} s",
        "cached-speedup": f"{separate / wall['cached_second_run']:.1f}x",
        "cached-each": f"{min(times['cached']):.0f}-{max(times['cached']):.0f} s",
        "cold-each": f"{min(times['cold']):.0f}-{max(times['cold']):.0f} s",
        "cold-vs-cached": f"{min(ratios):.0f}x to {max(ratios):.0f}x",
        "prefix-prefill": f"{times['multi_prefix_prefill_s']:.1f} s",
        "prefix-load": f"{times['cached_prefix_load_s']:.2f} s",
        "storing": f"{wall['cached_first_run'] - wall['multi']:+.1f} s",
        "right": f"{sum(report['correct'])} of {len(report['correct'])}",
        "dtype-kept-sets-changed": f"{total - same} of {total}",
        "dtype-answers-changed": f"{answers - check['same_answers']} of {answers}",
    }


def batch_facts(path: str) -> dict[str, str]:
    """``batch_bench.py``: the three ways' wall times and speed-ups, and how many answers agree with the loop's."""
    report = _load(path)
    wall, same, correct = report["wall_s"], report["same_answers_as_loop"], report["correct"]
    questions = report["documents"] * len(report["questions"])
    return {
        "questions-per-document": str(len(report["questions"])), "documents": str(report["documents"]),
        "questions": str(questions), "method": _method_ran(report),
        "loop": f"{wall['loop']:.0f} s", "batch": f"{wall['batch']:.0f} s", "ray": f"{wall['ray']:.0f} s",
        "batch-speedup": f"{wall['loop'] / wall['batch']:.1f}x", "ray-speedup": f"{wall['loop'] / wall['ray']:.1f}x",
        "same-batch": f"{same['batch']}/{questions}", "same-ray": f"{same['ray']}/{questions}",
        "right-loop": str(correct["loop"]), "right-batch": str(correct["batch"]), "right-ray": str(correct["ray"]),
    }


def serve_table(path: str) -> str:
    """``tools/bench/serve_bench.py``: a cold ask against the same question to a running server, per paired round."""
    report = _load(path)["cold_vs_warm"]
    rows = [[str(index + 1), f"{run['cold_s']:.1f} s", f"{run['warm_s']:.2f} s", f"{run['ratio']:.1f}x",
             f"{run['warm_time_to_first_text_s']:.2f} s", "yes" if run["same_answer"] else "no"]
            for index, run in enumerate(report["rounds"])]
    return _table((["round", "cold `snapkv ask` (model load included)", "the server, prefix held",
                    "less wall time", "server: first text after", "same answer"], rows))


def serve_facts(path: str) -> dict[str, str]:
    """``tools/bench/serve_bench.py``: the paired rounds' median ratio and range, and the many-clients run."""
    report = _load(path)
    warm, many = report["cold_vs_warm"], report["concurrent"]
    return {
        "tokens": f"{report['document_tokens']:,}", "new-tokens": str(report["max_new_tokens"]),
        "rounds": str(len(warm["rounds"])), "ratio": f"{warm['ratio']['median']:.1f}x",
        "ratio-range": f"{warm['ratio']['min']:.1f}-{warm['ratio']['max']:.1f}x",
        "cold": f"{warm['cold_s']['median']:.1f} s", "warm": f"{warm['warm_s']['median']:.2f} s",
        "first-text": f"{warm['warm_time_to_first_text_s']['median']:.2f} s",
        "startup": f"{report['server']['startup_s']:.1f} s",
        "clients": str(many["clients"]), "questions": str(many["questions_per_client"]),
        "documents": str(many["documents"]), "requests": str(many["requests"]),
        "as-serial": f"{many['answers_as_serial']}/{many['requests']}", "wall": f"{many['wall_s']:.0f} s",
        "p50": f"{many['p50_s']:.1f} s", "p95": f"{many['p95_s']:.1f} s",
        "held": f"{many['most_held_prefix_bytes'] / 2**20:.0f} MiB", "cap": f"{many['keep_mb']:.0f} MiB",
        "rss": f"{many['peak_rss_bytes'] / 2**30:.2f} GiB",
        "model-rss": f"{report['server']['model_rss_bytes'] / 2**30:.2f} GiB",
    }


def default_rule_facts(folder: str) -> dict[str, str]:
    """The default-method rule on its confirmation run: the full cache's right answers, each candidate's kept
    (``kept-1024-snapkv``; the default method as ``default``), the verdict on SnapKV at 1024 and the rule's outcome."""
    result = default_rule.decide(DOCS / folder)
    if result["default"] != DEFAULT_METHOD:
        raise ValueError(f"the rule picked {result['default']}, but the CLI's default is {DEFAULT_METHOD}")
    snapkv = result["budgets"][1024]["candidates"]["snapkv"]["against_best"]
    facts = {"full": str(result["full_right_pairs"]), "best-1024": f"`{result['budgets'][1024]['best']}`",
             "outcome": f"`{result['default']}`", "why": result["why"],
             "best-256": f"`{result['small_budget_choice']}`",
             "snapkv-1024": "a tie by the rule" if snapkv["tie"] else "a loss"}
    for budget, block in result["budgets"].items():
        for label, row in block["candidates"].items():
            facts[f"kept-{budget}-{'default' if label == DEFAULT_METHOD else label}"] = str(row["kept"])
    return facts


def selection_cost_facts(path: str) -> dict[str, str]:
    """``tools/bench/selection_cost.py``: each method's selection as a share of its prefill on one thread, lowest to
    highest over the lengths (``share-snapkv``; the default method as ``share-default``)."""
    rows = _load(path)["rows"]
    lengths = sorted({row["length"] for row in rows})
    facts = {"lengths": f"{lengths[0] // 1024}k-{lengths[-1] // 1024}k"}
    for method in {row["method"] for row in rows}:
        values = [row["share"]["median"] for row in rows if row["method"] == method and row["threads"] == 1]
        facts[f"share-{'default' if method == DEFAULT_METHOD else method}"] = (f"{100 * min(values):.1f}-"
                                                                              f"{100 * max(values):.1f}%")
    return facts


def long_document_facts(path: str) -> dict[str, str]:
    """``tools/bench/long_document_run.py``: one ``snapkv ask`` about a long PDF, where it ran, its prompt, answer
    (and whether it holds the planted fact), times, cache and memory."""
    result = _load(path)
    report, where = result["report"], result["provenance"]
    timings, cache, prompt = report["timings"], report["cache"], report["prompt"]
    found = result["fact"].rstrip(".").split()[-2:]  # "smoked juniper"
    return {
        "command": f"`{result['ask_command']}`", "commit": f"`{where['git']['commit'][:10]}`",
        "started": where["started"][:16], "cpus": str(where["machine"]["cpus"]), "torch": where["machine"]["torch"],
        "load-before": str(where["load_average_before"][0]), "load-after": str(where["load_average_after"][0]),
        "method": _method_ran(result), "budget": str(report["settings"]["budget"]),
        "prompt-tokens": f"{report['prompt_tokens']:,}", "document-tokens": f"{prompt['document']:,}",
        "pages": str(len(report["pages"])), "template": f"`{prompt['template_name']}`", "style": prompt["style"],
        "stopped-by": f"`{json.dumps(report['stop']['stopped_by'])}`", "answer": report["answer"].strip(),
        "verdict": "right" if all(word.lower() in report["answer"].lower() for word in found) else "wrong",
        "fact": result["fact"], "load": f"{timings['load_s']:.0f} s", "prefill": f"{timings['prefill_s']:.0f} s",
        "selection": f"{timings['selection_s']:.2f} s", "decode": f"{timings['decode_tokens_per_s']:.1f} tokens/s",
        "kv-before": f"{cache['bytes_before'] / 1e6:.0f} MB", "kv-after": f"{cache['bytes_after'] / 1e6:.1f} MB",
        "sliding": str(sum(layer["sliding_window"] for layer in report["layers"])),
        "layers": str(len(report["layers"])),
        "peak-rss": f"{report['memory']['peak_rss_bytes'] / 2**30:.2f} GiB",
    }


def decode_profile_facts(path: str) -> dict[str, str]:
    """``tools/probes/decode_profile.py``: the output projection's share of a decode step with a large vocabulary."""
    result = _load(path)
    run = result["report"]
    return {
        "model": run["model"], "vocab": f"{run['vocab']:,}", "hidden": str(run["hidden"]),
        "prompt-tokens": f"{run['prompt_tokens']:,}", "threads": str(run["torch_threads"]),
        "commit": f"`{result['provenance']['git']['commit'][:10]}`", "step": f"{run['step_ms']:.0f} ms",
        "decode": f"{run['decode_tokens_per_s']:.1f} tokens/s", "lm-head": f"{run['lm_head_ms_in_step']:.0f} ms",
        "lm-head-share": f"{100 * run['lm_head_share']:.0f}%",
        "prefill-rows": "the last position only" if run["prefill_lm_head_rows"] == [1] else
        f"{run['prefill_lm_head_rows']} rows",
        "float32": f"{run['lm_head_alone_float32_ms']:.0f} ms",
        "bfloat16": f"{run['lm_head_alone_bfloat16_ms']:.0f} ms",
    }


FACTS = {
    "accuracy": accuracy_facts,
    "default-test": default_test_facts,
    "speed": speed_facts,
    "prefill": prefill_facts,
    "prefill-pooled": prefill_pooled_facts,
    "niah": niah_facts,
    "long-memory": long_memory_facts,
    "peers": peers_facts,
    "multi-question": multi_question_facts,
    "batch": batch_facts,
    "serve": serve_facts,
    "default-rule": default_rule_facts,
    "selection-cost": selection_cost_facts,
    "long-document": long_document_facts,
    "decode-profile": decode_profile_facts,
    "llamacpp": llamacpp_facts,
    "decode-weights": decode_weights_facts,
    "decode-int4": decode_int4_facts,
    "decode-weights-retention": decode_weights_retention_facts,
    "decode-int4-retention": decode_int4_retention_facts,
    "kernel-probe": kernel_probe_facts,
    "compiled-probe": kernel_probe_facts,
    "decode-step-profile": decode_step_profile_facts,
    "decode-step-variants": decode_step_variants_facts,
    "methods-timing": methods_timing_facts,
    "quickstart": quickstart_facts,
}


GENERATORS = {
    "methods-table": methods_table,
    "report-panel": report_panel,
    "multi-question-runs": multi_question_runs,
    "multi-question-per-question": multi_question_per_question,
    "multi-question-dtype": multi_question_dtype,
    "chunked-prefill": chunked_prefill,
    "accuracy-table": accuracy_table,
    "accuracy-by-length": accuracy_by_length,
    "prompt-ranges": prompt_ranges,
    "speed-table": speed_table,
    "speed-comparisons": speed_comparisons,
    "provenance": provenance,
    "retention-pooled": retention_pooled,
    "inspect-found": inspect_found,
    "defaults-table": defaults_table,
    "niah-table": niah_table,
    "peers-table": peers_table,
    "peers-agreement": peers_agreement,
    "peers-default-held": peers_default_held,
    "peers-default-agreement": peers_default_agreement,
    "llamacpp-table": llamacpp_table,
    "dtype-retention": dtype_retention,
    "decode-weights-retention": decode_weights_retention,
    "decode-int4-retention": decode_int4_retention,
    "default-rule": default_rule_table,
    "decode-speed": decode_speed,
    "batch-table": batch_table,
    "serve-table": serve_table,
    "prefill-table": prefill_table,
    "long-memory-table": long_memory_table,
    "long-cost-table": long_cost_table,
    "niah-answers": niah_answers,
    "niah-kept": niah_kept,
    "methods-timing": methods_timing,
    "weight-dtype-table": weight_dtype_table,
    "kernel-probe": kernel_probe_table,
    "compiled-probe": kernel_probe_table,
    "decode-step-profile": decode_step_profile_table,
    "selection-cost": selection_cost,
    "selection-threads": selection_threads_table,
    "compiled-decode": compiled_decode_table,
    "decode-step-variants": decode_step_variants_table,
    "selection-cost-questions": selection_cost_questions,
    # docs/usage.md: the command line and the --json schemas, from the Typer app and the typed report
    # docs/testing.md: what each mutation group mutates and which tests it runs, from tools/bench/mutation.py
    "mutation-groups": mutation.groups_table,
    "usage-index": usage_doc.command_index,
    "usage-commands": usage_doc.command_reference,
    "json-schema": usage_doc.json_schema,
}


def specs(text: str) -> list[str]:
    """Every block's and every inline value's spec in a Markdown text."""
    return [match["spec"] for pattern in (BLOCK, VALUE) for match in pattern.finditer(text)]


# Generators that take several JSONs and can show the ones committed so far (the missing ones named below them).
PARTIAL = {"accuracy-table", "accuracy-by-length", "prompt-ranges", "provenance"}


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
            f"`tools/bench/run_benchmarks.sh`) write {'it' if one else 'them'}; `python -m tools.docs.tables "
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


def render_value(spec: str, computed: dict) -> str:
    """An inline value's text from the committed JSON (``computed``: the facts already computed, by function and
    arguments); where a JSON is missing, says so."""
    name, *arguments = spec.split()
    function, fact = name.split(".", 1)
    if not all(_committed(argument) for argument in arguments if _is_data(argument)):
        return "*not run yet*"
    key = (function, *arguments)
    if key not in computed:
        computed[key] = FACTS[function](*arguments)
    if fact not in computed[key]:
        raise KeyError(f"{spec}: {function} has no fact {fact!r} (it has {', '.join(computed[key])})")
    return computed[key][fact]


# The schema versions a results JSON of each kind may have (2 for any kind not named): the peers bench's rows record
# their method and settings from version 3 on, and its readers still take version 2's rows (as the SnapKV they ran).
SCHEMA_VERSIONS = {"peers": (2, 3)}


def stored_summaries_mismatches() -> list[str]:
    """Every JSON's stored summaries against a recomputation from its raw records."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, summary_rows
    from snapkv_cli.bench.speed import compare, summarize

    problems = []
    for path in sorted(DOCS.glob("results/**/*.json")):
        if path.parent.name == "mutation":  # tools/bench/mutation.py's results: counts of mutants, no bench summaries
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
        elif report["kind"] == "decode_step_profile" and report["summary"] != _decode_step_summary(report["rounds"]):
            problems.append(f"{path.relative_to(ROOT)}: stored summary differs from the rounds")
    return problems


def process(write: bool) -> list[str]:
    """Rewrite (``write``) or compare every generated block and inline value; returns those that differed."""
    differing = []
    computed: dict = {}
    for file in FILES:
        text = file.read_text(encoding="utf-8")

        def replace(match: re.Match, render, label: str, name: str = str(file.relative_to(ROOT))) -> str:
            expected = render(match["spec"])
            if match["body"] != expected:
                differing.append(f"{name}: {label}{match['spec']}")
            return match["start"] + expected + match["end"]

        updated = BLOCK.sub(lambda match: replace(match, render_block, ""), text)
        updated = VALUE.sub(lambda match: replace(match, lambda spec: render_value(spec, computed), "value "), updated)
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
