"""Benchmark tasks, scoring, retention arithmetic and seconds-long smoke runs of both benchmarks on the tiny model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from snapkv_cli.answering.documents import Document, Page
from snapkv_cli.answering.prompting import build_prompt, load_template
from snapkv_cli.bench.accuracy import AccuracyPlan, Outcome, summary_rows, tally
from snapkv_cli.bench.haystack import split_paragraphs
from snapkv_cli.bench.retention import Paired, Tally, wilson_interval
from snapkv_cli.bench.tasks import NEW_TOKENS, TASK_KINDS, TASKS, VARIABLES, make_tasks
from snapkv_cli.cli import app
from tests.helpers import recorded_forwards


def prompt_length(tokenizer, template, task) -> int:
    return build_prompt(tokenizer, Document("t", "text", (Page(1, task.document),)), task.question, template).length


# -- tasks ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(TASKS))
def test_tasks_are_deterministic_and_well_formed(tokenizer, template, kind):
    tasks = make_tasks(tokenizer, kind, 1500, 3, template, seed=7)
    assert tasks == make_tasks(tokenizer, kind, 1500, 3, template, seed=7)
    assert tasks != make_tasks(tokenizer, kind, 1500, 3, template, seed=8)
    assert len({task.document for task in tasks}) == 3
    for task in tasks:
        for answer in task.answers:  # a chain variable is assigned once (and read once by the next)
            needle = f"VAR {answer} =" if kind == "variable_tracking" else answer
            assert task.document.count(needle) == 1, (answer, kind)
        for distractor in task.distractors:
            assert distractor not in task.answers and distractor in task.document
        assert task.is_correct(" and ".join(task.answers))
        assert not task.is_correct("I do not know")


@pytest.mark.parametrize("kind", list(TASKS))
@pytest.mark.parametrize("length", [400, 1000, 2048])
def test_no_task_prompt_exceeds_the_usable_context(tokenizer, template, kind, length):
    """The final prompt (template, chat tokens, separators, question) is sized, not just the prose: at most the
    length asked, at most the context minus the answer's tokens, and not far below."""
    context = 1536
    limit = min(length, context - NEW_TOKENS[kind])
    tasks = make_tasks(tokenizer, kind, length, 4, template, max_prompt_tokens=context - NEW_TOKENS[kind])
    for task in tasks:
        tokens = prompt_length(tokenizer, template, task)
        assert limit - 60 <= tokens <= limit, (kind, length, tokens, limit)


def test_depths_spread_over_the_document(tokenizer, template):
    tasks = make_tasks(tokenizer, "single_needle", 1200, 3, template)
    positions = [task.document.index(task.answers[0]) / len(task.document) for task in tasks]
    assert positions[0] < 0.2 and 0.35 < positions[1] < 0.65 and positions[2] > 0.8


def test_question_first_keeps_the_question_out_of_the_window(tokenizer, template):
    (task,) = make_tasks(tokenizer, "question_first", 1000, 1, template)
    assert task.document.startswith("Question: What is the secret pass code?")
    assert "pass code" not in task.question


def _paragraphs(task) -> set[str]:
    """The haystack's prose (needles and the question_first header left out)."""
    return {p for p in task.document.split("\n\n") if not any(code in p for code in task.codes)
            and not p.startswith(("Question:", "VAR "))}


def test_tune_and_test_splits_share_no_code_or_haystack(tokenizer, template):
    """Codes are disjoint; every piece of prose comes from its own split's pool (whole paragraphs, or the first
    sentences of one where a whole one did not fit), and no paragraph serves both splits."""
    pools = {split: split_paragraphs(split) for split in ("tune", "test")}
    assert not set(pools["tune"]) & set(pools["test"])
    by_split = {}
    for split in ("tune", "test"):
        tasks = [task for kind in TASKS for length in (600, 1500)
                 for task in make_tasks(tokenizer, kind, length, 3, template, split=split)]
        prose = set().union(*(_paragraphs(task) for task in tasks))
        assert all(any(paragraph.startswith(piece) for paragraph in pools[split]) for piece in prose)
        by_split[split] = ({code for task in tasks for code in task.codes}, prose & set(pools[split]))
        assert all(task.seed.startswith(f"{split}/") for task in tasks)
    (tune_codes, tune_prose), (test_codes, test_prose) = by_split["tune"], by_split["test"]
    assert tune_codes and test_codes and not tune_codes & test_codes
    assert all(int(code) % 4 == 0 for code in tune_codes) and not any(int(code) % 4 == 0 for code in test_codes)
    assert len(tune_prose) > 20 and len(test_prose) > 20 and not tune_prose & test_prose


def test_samples_are_drawn_independently_across_lengths_and_tasks(tokenizer, template):
    """Each sample has its own seed (split, task, length and index): other codes at another length, a haystack that
    is not the longer one's beginning, and question_first not built from single_needle's code and prose."""
    short = make_tasks(tokenizer, "single_needle", 800, 3, template)
    long = make_tasks(tokenizer, "single_needle", 1600, 3, template)
    first = make_tasks(tokenizer, "question_first", 800, 3, template)
    for a, b, q in zip(short, long, first):
        assert a.answers != b.answers and a.answers != q.answers
        short_prose = [p for p in a.document.split("\n\n") if p in _paragraphs(a)]
        long_prose = [p for p in b.document.split("\n\n") if p in _paragraphs(b)]
        assert long_prose[: len(short_prose)] != short_prose
        assert q.document.split("\n\n")[1:4] != a.document.split("\n\n")[:3]
    assert len({task.seed for task in short + long + first}) == 9


# -- scoring -------------------------------------------------------------------------------------------------------

def test_single_code_scoring_uses_word_boundaries_and_the_exact_set(tokenizer, template):
    (task,) = make_tasks(tokenizer, "single_needle", 600, 1, template)
    code = task.answers[0]
    assert task.is_correct(f"The secret pass code is {code}.")
    assert task.is_correct(f"{code}")
    assert not task.is_correct(f"1{code}9")  # the code inside a longer number
    assert not task.is_correct(f"0{code}")  # zero-padded
    assert not task.is_correct(f"{code[:-1]}")
    assert not task.is_correct(f"It is {code} or {int(code) + 1}.")  # hedging with a second code


def test_multi_key_scoring_rejects_listing_every_code(tokenizer, template):
    (task,) = make_tasks(tokenizer, "multi_key", 800, 1, template)
    assert task.is_correct(f"The pass code is {task.answers[0]}.")
    assert not task.is_correct(", ".join(task.codes))  # the asked code plus every distractor
    assert not task.is_correct(f"{task.answers[0]}, {task.distractors[0]}")
    assert not task.is_correct(task.distractors[0])


def test_multi_value_scoring_needs_all_values_and_nothing_else(tokenizer, template):
    (task,) = make_tasks(tokenizer, "multi_value", 800, 1, template)
    a, b, c = task.answers
    assert task.is_correct(f"1. {a}\n2. {b}\n3. {c}")  # list markers are not codes
    assert task.is_correct(f"{c}, {a} and {b}")
    assert not task.is_correct(f"1. {a}\n2. {b}")
    assert not task.is_correct(f"1. {a}\n2. {b}\n3. {c}\n4. {int(c) + 1}\n5. {int(c) + 2}")  # counting on


def test_variable_tracking_scoring_is_case_insensitive_and_rejects_wrong_chains(tokenizer, template):
    (task,) = make_tasks(tokenizer, "variable_tracking", 800, 1, template)
    first, second, third = task.answers
    (decoy,) = task.distractors
    assert task.is_correct(f"{first.lower()}, {second.title()} and VAR {third}")
    assert not task.is_correct(f"{first}, {second}")  # the chain cut short
    assert not task.is_correct(f"{first}, {second}, {third}, {decoy}")  # the decoy too
    assert not task.is_correct(f"{first}, {second}, {decoy}")  # a wrong chain
    assert not task.is_correct(f"{first}S, {second}, {third}")  # a longer word is not the name
    spare = next(name for name in VARIABLES if name not in task.answers + task.distractors)
    assert not task.is_correct(f"{first}, {second}, {third}, {spare}")


# -- retention -----------------------------------------------------------------------------------------------------

def outcome(method, budget, sample, correct, task="single_needle", length=1024):
    return Outcome(task, length, sample, f"test/{task}/{length}/{sample}/0", 0.5, length - 10, 64, method, budget,
                   correct, "", ["12345"], [], 5)


def test_retention_counts_kept_gained_and_lost_per_sample():
    """Same accuracy as the full cache (4/6), but one sample gained and one lost: retention is 3/4, not 100%."""
    full = [True, True, True, False, False, True]
    snap = [True, False, True, True, False, True]
    outcomes = [outcome("full", None, i, c) for i, c in enumerate(full)]
    outcomes += [outcome("snapkv", 256, i, c) for i, c in enumerate(snap)]
    counts = tally(outcomes)[("single_needle", 1024, "snapkv", 256)]
    assert (counts.samples, counts.correct, counts.full_correct) == (6, 4, 4)
    assert (counts.kept, counts.gained, counts.lost) == (3, 1, 1)
    assert counts.retention == pytest.approx(0.75)
    low, high = counts.retention_interval
    assert low == pytest.approx(0.3006, abs=1e-4) and high == pytest.approx(0.9544, abs=1e-4)
    assert tally(outcomes)[("single_needle", 1024, "full", None)].retention == 1.0


def test_reports_with_other_seeds_merge_without_mixing_samples():
    from snapkv_cli.bench.accuracy import merge_reports

    def report(seed, full, snap):
        outcomes = [outcome("full", None, 0, full), outcome("snapkv", 256, 0, snap)]
        for o in outcomes:
            o.seed = f"test/single_needle/1024/0/{seed}"
        plan = {"window_size": 32, "kernel_size": 15, "pooling": "maxpool", "gqa_aggregation": "mean",
                "max_new_tokens": None, "split": "test", "seed": seed, "lengths": [1024], "tasks": ["single_needle"]}
        return {"plan": plan, "provenance": {}, "outcomes": [vars(o) for o in outcomes], "skipped": []}

    merged = merge_reports([report(0, True, True), report(1, False, True)])
    from snapkv_cli.bench.accuracy import outcomes_from_json

    counts = tally(outcomes_from_json(merged))[("single_needle", 1024, "snapkv", 256)]
    assert (counts.samples, counts.kept, counts.gained, counts.lost) == (2, 1, 1, 0)
    with pytest.raises(ValueError, match="split"):
        merge_reports([report(0, True, True), {**report(1, True, True), "plan": {**report(1, True, True)["plan"],
                                                                                 "split": "tune"}}])


def test_retention_never_pools_lengths():
    outcomes = [outcome("full", None, 0, True), outcome("snapkv", 256, 0, True),
                outcome("full", None, 0, True, length=2048), outcome("snapkv", 256, 0, False, length=2048)]
    rows = {(r["length"], r["method"]): r for r in summary_rows(outcomes, pool_tasks=True)}
    assert rows[(1024, "snapkv")]["retention"] == 1.0 and rows[(2048, "snapkv")]["retention"] == 0.0
    assert {r["task"] for r in rows.values()} == {"all"}


def test_wilson_interval_known_values():
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(0, 10)[1] == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(10, 10)[0] == pytest.approx(0.7225, abs=1e-4) and wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 0) is None
    tally_ = Tally()
    tally_.add(Paired(method_correct=True, full_correct=False))
    assert tally_.retention is None and tally_.gained == 1


# -- smoke runs ----------------------------------------------------------------------------------------------------

def test_accuracy_benchmark_smoke_run(short_context_model_path, tmp_path):
    """A 512-token context: prompts must stay within 512 minus the answer's room (also for a 2048-token length); a
    budget that holds the whole prompt is not run and shows as uncompressed."""
    markdown, png = tmp_path / "accuracy.md", tmp_path / "accuracy.png"
    result = CliRunner().invoke(app, ["bench", "accuracy", "--model", short_context_model_path, "--lengths", "300,2048",
                                      "--budgets", "64,1024", "--methods", "full,snapkv,h2o+pyramid", "--samples", "2",
                                      "--tasks", "single_needle,multi_value", "--max-new-tokens", "6", "--json",
                                      "--markdown", str(markdown), "--png", str(png)])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["kind"] == "accuracy" and report["plan"]["split"] == "test"
    assert report["provenance"]["git"]["commit"] and report["provenance"]["machine"]["cpus"]
    outcomes = report["outcomes"]
    assert len(outcomes) == 2 * 2 * 2 * (1 + 2)  # lengths x tasks x samples x (full + 2 methods at budget 64)
    for row in outcomes:
        assert row["max_new_tokens"] == 6 and row["generated_tokens"] <= 6
        assert min(row["length"], 512 - 6) - 60 <= row["prompt_tokens"] <= min(row["length"], 512 - 6)
    assert {(s["method"], s["budget"]) for s in report["skipped"]} == {("snapkv", 1024), ("h2o+pyramid", 1024)}
    assert {row["length"] for row in report["by_length"]} == {300, 2048}
    text = markdown.read_text()
    assert "| task | method | budget |" in text and "uncompressed" in text
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "Accuracy" in result.stderr


def test_accuracy_prefills_each_document_once_on_the_one_run_path(tiny_model_path):
    """Each sample is one DocumentSession: one forward from position 0 over the document's prefix, then every method
    prefills only the question on a fork of it (H2O's fork needs the attention sums: the session kept them), and
    every answer is the answer a one-question ``ask`` gives with the same settings."""
    from snapkv_cli.answering import session as pipeline
    from snapkv_cli.bench.accuracy import run_accuracy
    from snapkv_cli.generation import GenerationOptions
    from snapkv_cli.models.loader import load_model

    loaded = load_model(tiny_model_path, device="cpu")
    template = load_template()
    plan = AccuracyPlan(methods=("full", "snapkv", "h2o"), budgets=(64,), lengths=(300,), tasks=("single_needle",),
                        samples=2, max_new_tokens=4)
    with recorded_forwards(loaded.model) as forwards:
        outcomes, skipped = run_accuracy(loaded, plan, template)
    assert not skipped and len(outcomes) == 2 * 3
    tasks = make_tasks(loaded.tokenizer, "single_needle", 300, 2, template, max_prompt_tokens=300)
    prompts = [build_prompt(loaded.tokenizer, Document(t.seed, "text", (Page(1, t.document),)), t.question, template)
               for t in tasks]
    assert [tokens for start, tokens in forwards if start == 0] == [p.prefix_length for p in prompts]
    question_forwards = [tokens for start, tokens in forwards if start in {p.prefix_length for p in prompts}]
    assert question_forwards == [p.length - p.prefix_length for p in prompts for _ in range(3)]
    for o in outcomes:
        task = tasks[o.sample]
        alone = pipeline.ask(loaded, Document(task.seed, "text", (Page(1, task.document),)), task.question,
                             plan.settings(o.method, o.budget), template,
                             generation=GenerationOptions(max_new_tokens=4))
        assert o.answer == alone.result.answer and o.prompt_tokens == alone.prompt.length, (o.method, o.sample)


def test_accuracy_answer_room_is_sized_per_task_and_split_is_an_option(tiny_model_path):
    assert {kind: AccuracyPlan().new_tokens(kind) for kind in TASK_KINDS} == NEW_TOKENS
    # the synthetic tasks' answers (codes, lists) need room; docqa's are a word or a number
    assert min(NEW_TOKENS[kind] for kind in TASKS) >= 64 and NEW_TOKENS["docqa"] >= 16
    assert NEW_TOKENS["multi_value"] > NEW_TOKENS["single_needle"]
    assert AccuracyPlan(max_new_tokens=80).new_tokens("single_needle") == 80
    result = CliRunner().invoke(app, ["bench", "accuracy", "--model", tiny_model_path, "--lengths", "300",
                                      "--budgets", "64", "--methods", "full,snapkv", "--samples", "1",
                                      "--tasks", "single_needle", "--max-new-tokens", "3", "--split", "tune", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert all(row["seed"].startswith("tune/") for row in report["outcomes"]) and report["plan"]["split"] == "tune"
    bad = CliRunner().invoke(app, ["bench", "accuracy", "--split", "train"])
    assert bad.exit_code == 1 and "unknown split" in bad.stderr


def test_bench_sample_reruns_a_cell_with_ask(short_context_model_path, tmp_path):
    """``bench sample`` gives one sample's document and question; ``ask`` on them answers as the bench's cell did."""
    from snapkv_cli.answering.documents import load_document

    common = ["--model", short_context_model_path, "--max-new-tokens", "6"]
    run = CliRunner().invoke(app, ["bench", "accuracy", *common, "--lengths", "2048", "--budgets", "64", "--methods",
                                   "full,snapkv,defensivekv+uniformheads+causalpool", "--samples", "2", "--tasks",
                                   "multi_key", "--seed", "3", "--json"])
    assert run.exit_code == 0, run.stderr
    cells = {(o["method"], o["budget"]): o for o in json.loads(run.stdout)["outcomes"] if o["sample"] == 1}
    document = tmp_path / "sample.txt"
    pick = ["--task", "multi_key", "--length", "2048", "--index", "1", "--samples", "2", "--seed", "3"]
    result = CliRunner().invoke(app, ["bench", "sample", *common, *pick, "--out", str(document), "--json"])
    assert result.exit_code == 0, result.stderr
    sample = json.loads(result.stdout)
    assert sample["kind"] == "bench_sample" and sample["task_seed"] == cells[("full", None)]["seed"]
    assert sample["answers"] == cells[("full", None)]["expected"] and sample["max_new_tokens"] == 6
    assert load_document(str(document)).text == sample["document"]  # the file is the bench's document
    assert f"Expected: {', '.join(sample['answers'])}" in result.stderr
    assert f"Rerun: snapkv ask {document} " in result.stderr and "--max-new-tokens 6" in result.stderr
    for method, options in (("full", ["--method", "full"]), ("snapkv", ["--method", "snapkv", "--budget", "64"]),
                            ("defensivekv+uniformheads+causalpool", ["--budget", "64"])):  # the CLI's default method
        ask = CliRunner().invoke(app, ["ask", str(document), sample["question"], *common, *options, "--json", "-q"])
        assert ask.exit_code == 0, ask.stderr
        cell = cells[(method, None if method == "full" else 64)]
        assert json.loads(ask.stdout)["answer"] == cell["answer"], method
    plain = CliRunner().invoke(app, ["bench", "sample", *common, *pick])
    assert plain.exit_code == 0 and plain.stdout == sample["document"] and "Question: " in plain.stderr
    for bad, message in ((["--index", "2"], "Error: --index 2 is out of range: the run has 2 samples (0-1)"),
                         (["--index", "0", "--task", "magic"], "Error: unknown task magic")):
        arguments = ["bench", "sample", "--task", "multi_key", "--length", "2048", "--samples", "2", *bad]
        failed = CliRunner().invoke(app, arguments)
        assert failed.exit_code == 1 and failed.stderr.startswith(message), failed.stderr


def test_speed_benchmark_smoke_run(tiny_model_path, tmp_path):
    markdown = tmp_path / "speed.md"
    result = CliRunner().invoke(app, ["bench", "speed", "--model", tiny_model_path, "--lengths", "200",
                                      "--budgets", "64,1000", "--max-new-tokens", "4", "--repeats", "2", "--json",
                                      "--markdown", str(markdown)])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    samples = report["samples"]
    default = "defensivekv+uniformheads+causalpool"  # the CLI's default method compresses unless --method says
    assert report["plan"]["method"] == default and report["plan"]["max_new_tokens"] == 4
    configurations = [("weights-only", None), ("transformers", None), ("full", None), (default, 64)]
    assert [(s["method"], s["budget"]) for s in samples] == configurations[::-1] + configurations + configurations[::-1]
    assert [s["round"] for s in samples] == [-1] * 4 + [0] * 4 + [1] * 4
    assert all(s["plain"] == (s["method"] in ("weights-only", "transformers")) for s in samples)
    summary = {row["method"]: row for row in report["summary"]}
    assert all(row["repeats"] == 2 for row in summary.values())
    assert summary[default]["kv_bytes"] * 200 == pytest.approx(summary["full"]["kv_bytes"] * 64)
    assert all(s["decode_tokens_per_s"] > 0 and s["decode_steps"] == 3 for s in samples)
    comparisons = {row["method"]: row for row in report["comparisons"]}
    assert comparisons[default]["decode_vs_transformers"]["n"] == 2
    assert comparisons[default]["decode_vs_full"]["n"] == 2 and comparisons["full"]["decode_vs_full"] is None
    assert comparisons[default]["prefill_overhead_vs_full"]["n"] == 2
    assert report["provenance"]["git"]["commit"]
    assert "prefill vs transformers" in markdown.read_text()


def test_the_benches_decode_with_the_weights_decode_weights_names(tiny_model_path, monkeypatch):
    """--decode-weights (a model option, so every bench takes it) reaches every run of this project's cache; the
    accuracy plan records it."""
    from snapkv_cli.generation import generate

    asked = []
    original = generate.decode_path

    def recording(model, decode_weights):
        asked.append(decode_weights)
        return original(model, decode_weights)

    monkeypatch.setattr(generate, "decode_path", recording)
    accuracy = CliRunner().invoke(app, ["bench", "accuracy", "--model", tiny_model_path, "--lengths", "300",
                                        "--budgets", "64", "--methods", "full,snapkv", "--samples", "1",
                                        "--tasks", "single_needle", "--max-new-tokens", "2", "--json",
                                        "--decode-weights", "bf16"])
    assert accuracy.exit_code == 0, accuracy.stderr
    assert json.loads(accuracy.stdout)["plan"]["decode_weights"] == "bfloat16"
    assert asked == ["bfloat16"] * 2
    asked.clear()
    speed = CliRunner().invoke(app, ["bench", "speed", "--model", tiny_model_path, "--lengths", "200", "--budgets",
                                     "64", "--max-new-tokens", "2", "--repeats", "1", "--warmup", "0", "--json",
                                     "--decode-weights", "bfloat16"])
    assert speed.exit_code == 0, speed.stderr
    assert json.loads(speed.stdout)["plan"]["decode_weights"] == "bfloat16"
    assert asked == ["bfloat16"] * 2  # the full cache's row and the compressing method's
    asked.clear()
    default = CliRunner().invoke(app, ["bench", "speed", "--model", tiny_model_path, "--lengths", "200", "--budgets",
                                       "64", "--max-new-tokens", "2", "--repeats", "1", "--warmup", "0", "--json"])
    assert default.exit_code == 0, default.stderr
    assert asked == ["same"] * 2


def test_bench_rejects_bad_lists(tiny_model_path):
    result = CliRunner().invoke(app, ["bench", "accuracy", "--methods", "snapkv,magic"])
    assert result.exit_code == 1 and result.stderr.startswith("Error: unknown method magic")
    for label in ("full+pyramid", "pyramidkv+pyramid", "snapkv+uniform", "snapkv+uniformheads",
                  "defensivekv+uniformheads+pyramid", "chunkkv+causalpool", "h2o+causalpool", "full+wholewords",
                  "snapkv+wholewords+causalpool", "streamingllm+sharedheads", "defensivekv+uniformheads+sharedheads",
                  "snapkv+causalpool+sharedheads"):
        result = CliRunner().invoke(app, ["bench", "accuracy", "--methods", f"full,{label}"])
        assert result.exit_code == 1 and result.stderr.startswith(f"Error: unknown method {label}")


@pytest.mark.parametrize("option, value, expected", [
    ("--budgets", "0,64", "--budgets must be positive integers, e.g. 256,1024"),
    ("--budgets", " , ", "--budgets must be positive integers, e.g. 256,1024"),
    ("--budgets", "64,x", "--budgets must be comma-separated integers, e.g. 256,1024"),
    ("--lengths", "1024,-2048", "--lengths must be positive integers, e.g. 256,1024"),
    ("--lengths", "1024;2048", "--lengths must be comma-separated integers, e.g. 256,1024"),
])
def test_bench_number_lists_must_be_positive_integers(tiny_model_path, tmp_path, option, value, expected):
    """A bad list fails at once, naming its option, before an output file is checked or the model loaded."""
    result = CliRunner().invoke(app, ["bench", "accuracy", "--model", tiny_model_path, option, value,
                                      "--markdown", str(tmp_path / "missing" / "out.md")])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == f"Error: {expected}\n"


def test_bench_number_lists_take_1_and_spaces_after_commas(tiny_model_path, tmp_path):
    """1 is a positive integer: "1, 64" passes the list checks, so the run goes on to the next check (here the
    --markdown file's directory, which does not exist)."""
    markdown = tmp_path / "missing" / "out.md"
    result = CliRunner().invoke(app, ["bench", "accuracy", "--model", tiny_model_path, "--budgets", "1, 64",
                                      "--lengths", "1", "--markdown", str(markdown)])
    assert result.exit_code == 1
    assert result.stderr == (f"Error: cannot write {markdown}: the directory {markdown.parent} does not exist; "
                             "create it first\n")


@pytest.mark.parametrize("tasks, named", [("single_needle, nope,bogus", "nope, bogus"), (" , ", "(none)")])
def test_bench_names_the_unknown_tasks_and_the_choices(tiny_model_path, tmp_path, tasks, named):
    """Unknown names are listed as given (trimmed), or "(none)" when no name is given, then every choice."""
    result = CliRunner().invoke(app, ["bench", "accuracy", "--model", tiny_model_path, "--tasks", tasks,
                                      "--markdown", str(tmp_path / "missing" / "out.md")])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (f"Error: unknown task {named}: choose from single_needle, multi_key, multi_value, "
                             "variable_tracking, question_first, docqa\n")


def test_bench_takes_known_names_with_spaces_after_commas(tiny_model_path, tmp_path):
    markdown = tmp_path / "missing" / "out.md"
    result = CliRunner().invoke(app, ["bench", "accuracy", "--model", tiny_model_path, "--tasks",
                                      "single_needle, multi_key", "--methods", "full, snapkv", "--markdown",
                                      str(markdown)])
    assert result.exit_code == 1 and result.stderr.startswith(f"Error: cannot write {markdown}:")


def test_a_method_label_sets_the_allotment_its_suffix_names_on_its_policy():
    plan = AccuracyPlan(methods=("full", "defensivekv", "defensivekv+pyramid", "h2o+pyramid"))
    plain, pyramid = plan.settings("defensivekv", 256), plan.settings("defensivekv+pyramid", 256)
    uniform = plan.settings("defensivekv+uniformheads", 128)
    assert (plain.method, plain.layer_budgets, plain.head_budgets) == ("defensivekv", None, None)
    assert (pyramid.method, pyramid.layer_budgets, pyramid.head_budgets, pyramid.max_capacity_prompt) == (
        "defensivekv", "pyramid", None, 256)
    assert (uniform.method, uniform.layer_budgets, uniform.head_budgets) == ("defensivekv", None, "uniform")
    assert (plain.pooling_window, uniform.pooling_window) == ("centered", "centered")
    default = plan.settings("defensivekv+uniformheads+causalpool", 128)  # the CLI's default method, as a label
    assert (default.method, default.head_budgets, default.pooling_window) == ("defensivekv", "uniform", "causal")
    both = plan.settings("defensivekv+pyramid+uniformheads+causalpool", 256)
    assert (both.layer_budgets, both.head_budgets, both.pooling_window) == ("pyramid", "uniform", "causal")
    assert not both.whole_words and plan.settings("chunkkv+wholewords", 64).whole_words
    words = plan.settings("defensivekv+uniformheads+causalpool+wholewords", 128)
    assert (words.head_budgets, words.pooling_window, words.whole_words) == ("uniform", "causal", True)
    assert plan.needs_attention_sums()  # H2O's, through its label
    assert not AccuracyPlan(methods=("full", "snapkv+pyramid")).needs_attention_sums()


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(TASKS))
def test_default_model_prompts_fit_its_context_at_8k(kind):
    """With the default model's tokenizer and chat template, each "8192" prompt stays within the 8,192-token context
    minus the answer's room, and within 200 tokens of it."""
    from snapkv_cli.answering.session import context_length
    from snapkv_cli.models.loader import load_model

    loaded = load_model(device="cpu")
    context, template = context_length(loaded), load_template()
    limit = context - NEW_TOKENS[kind]
    for task in make_tasks(loaded.tokenizer, kind, 8192, 3, template, max_prompt_tokens=limit):
        assert limit - 200 <= prompt_length(loaded.tokenizer, template, task) <= limit


def test_the_default_label_runs_the_command_lines_default_method_with_its_settings():
    from snapkv_cli import defaults
    from snapkv_cli.bench.grid import default_label, method_labels, parse_label

    assert default_label() in method_labels()
    assert parse_label(default_label()) == (defaults.METHOD, defaults.METHOD_SETTINGS)


def test_speed_benchmark_times_the_method_it_is_given(tiny_model_path):
    # --new-tokens: the hidden old name of --max-new-tokens, which the recorded commands of docs/results use
    arguments = ["bench", "speed", "--model", tiny_model_path, "--lengths", "200", "--budgets", "64",
                 "--new-tokens", "3", "--repeats", "1", "--warmup", "0", "--json"]
    result = CliRunner().invoke(app, [*arguments, "--method", "snapkv+causalpool"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["plan"]["max_new_tokens"] == 3
    assert [s["method"] for s in report["samples"]][-1] == "snapkv+causalpool"
    for bad in ("full", "magic"):  # full is always timed; a method must compress
        failed = CliRunner().invoke(app, [*arguments, "--method", bad])
        assert failed.exit_code == 1 and failed.stderr.startswith(f"Error: unknown method {bad}"), failed.stderr
        assert failed.stdout == ""


def test_provenance_names_the_cpu_features_speed_depends_on(tmp_path, monkeypatch):
    """Two hosts with the same model name can differ in AVX-512 / bfloat16 units; a result records which it had."""
    from snapkv_cli.bench.provenance import cpu_vector_features
    from snapkv_cli.models import cpu_features

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx fma avx2 avx512f avx512_bf16 "
                       "sha_ni\n\nprocessor\t: 1\nflags\t\t: fpu\n", encoding="utf-8")
    monkeypatch.setattr(cpu_features, "CPUINFO", cpuinfo)
    assert cpu_vector_features() == ["avx2", "fma", "avx512f", "avx512_bf16"]
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx\n", encoding="utf-8")
    assert cpu_vector_features() == []


def test_the_benchmarks_methods_help_names_every_method():
    """``--methods`` lists every registered method before the suffixes that combine with them."""
    import re

    from typer.testing import CliRunner

    from snapkv_cli.cli import app
    from snapkv_cli.engine.methods import METHODS

    for bench in ("accuracy", "niah"):
        shown = " ".join(re.sub(r"[│╭╮╰╯─]", " ", CliRunner().invoke(app, ["bench", bench, "--help"]).stdout).split())
        listed = shown.split("Comma-separated methods: a method (")[1].split(")")[0]
        assert re.split(r", | or ", listed) == list(METHODS), bench
