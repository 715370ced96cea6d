"""Several questions about one document: the prefix is prefilled once and forked per question.

Every answer must be the one a separate ``snapkv ask`` gives with the same settings: the same greedy tokens and the
same kept positions in every layer and KV head; SnapKV scores agree within atol 1e-5 / rtol 1e-4 (the question's
prefill on a fork multiplies the same keys in differently shaped matrices than a whole-prompt prefill, so the last
float32 bits may differ). The tiny random model answers gibberish: these tests check mechanics, not content.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import torch
from typer.testing import CliRunner

import snapkv_cli.answering.session as pipeline
import snapkv_cli.cli as cli
from snapkv_cli.answering.documents import Document, Page, load_document
from snapkv_cli.answering.prompting import load_template
from snapkv_cli.bench.grid import default_label, parse_label
from snapkv_cli.engine import METHODS, CompressionSettings
from snapkv_cli.generation import GenerationOptions
from tests.helpers import chunks, panel_text, record_loaded_forwards, recorded_forwards, recording_presenter

GENERATION_4 = GenerationOptions(max_new_tokens=4)
GENERATION_6 = GenerationOptions(max_new_tokens=6)
GENERATION_24 = GenerationOptions(max_new_tokens=24)

runner = CliRunner()
NOTES = (
    "Skerrow Point Light, winter log.\n\n"
    "The lamp was lit at dusk and the wind came round to the north-west by midnight. "
    "Duncan Hale repaired the fog signal and oiled the clockwork before the storm. "
    "The relief boat Morven Lass arrived on Tuesday with coal, letters and fresh bread.\n\n"
    "Agnes Tolland counted 117 steps up to the lamp room and wrote the barometer reading in the book. "
    "The station's coastguard code is K-4417; it is painted on the door of the oil store.\n"
)
QUESTIONS = ["Who repaired the fog signal?", "What is the station's coastguard code, exactly as painted?",
             "How many steps?"]
SMALL = ["--max-new-tokens", "5", "--budget", "64", "--window", "16"]


pytestmark = pytest.mark.usefixtures("doc_cache_dir", "one_thread")


def invoke(*args, input=None):
    return runner.invoke(cli.app, list(args), input=input)


def ok(*args, input=None):
    result = invoke(*args, input=input)
    assert result.exit_code == 0, (result.stderr, result.exception)
    return result


def jsonl(text: str) -> list[dict]:
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def assert_same_answer(separate, shared):
    assert shared.result.generated_ids == separate.result.generated_ids
    assert shared.prompt.input_ids == separate.prompt.input_ids
    assert sorted(shared.result.cache.records) == sorted(separate.result.cache.records)
    for layer, record in separate.result.cache.records.items():
        other = shared.result.cache.records[layer]
        assert torch.equal(record.kept_positions, other.kept_positions), f"layer {layer}"
        if record.scores is not None:
            torch.testing.assert_close(record.scores, other.scores, atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------------------- the library


@pytest.mark.parametrize("label", [*(name for name, method in METHODS.items() if method.compresses), default_label()])
def test_session_matches_separate_runs_and_prefills_once(loaded, notes, label, monkeypatch):
    document, template = load_document(notes), load_template()
    method, overrides = parse_label(label)  # every method, and the CLI's default method with its own settings
    settings = CompressionSettings(method=method, window_size=16, max_capacity_prompt=64, kernel_size=15,
                                   pooling="maxpool", **overrides)
    built = []
    real_build = pipeline.DocumentSession._obtain
    monkeypatch.setattr(pipeline.DocumentSession, "_obtain",
                        lambda self, ids: built.append(len(ids)) or real_build(self, ids))
    session = pipeline.DocumentSession(loaded, document, settings, template, generation=GENERATION_6)
    for index, question in enumerate(QUESTIONS):
        shared = session.ask(question)
        separate = pipeline.ask(loaded, document, question, settings, template, generation=GENERATION_6)
        assert_same_answer(separate, shared)
        report = shared.report.to_json()
        assert report["question_index"] == index
        assert report["prefix"]["tokens"] == shared.prompt.prefix_length > 0
        assert report["prefix"]["source"] == ("prefill" if index == 0 else "memory")
        assert report["reused_prefix_tokens"] == (0 if index == 0 else shared.prompt.prefix_length)
        assert report["doc_cache"]["status"] == "off"
        assert report["cache"] == separate.report.to_json()["cache"]
        assert report["layers"] == separate.report.to_json()["layers"]
    assert len(built) == 1  # the document was read once


@pytest.mark.parametrize("chunk", [None, 8])
def test_each_question_prefills_only_its_own_tokens(loaded, notes, chunk):
    """What the model received: the prefix once (in chunks, if asked), then for each question only the tokens after
    the prefix (in chunks too), then one token per decode step. A lone question is prefilled whole, in one pass."""
    document, template = load_document(notes), load_template()
    settings = CompressionSettings(window_size=16, max_capacity_prompt=64, kernel_size=15, pooling="maxpool")
    generation = GenerationOptions(max_new_tokens=3, stop_at_eos=False, prefill_chunk=chunk)
    session = pipeline.DocumentSession(loaded, document, settings, template, generation=generation)
    for index, question in enumerate(QUESTIONS):
        with recorded_forwards(loaded.model) as forwards:
            answer = session.ask(question)
        prompt = answer.prompt
        prefix_forwards = chunks(0, prompt.prefix_length, chunk) if index == 0 else []
        decode_forwards = [(prompt.length, 1), (prompt.length + 1, 1)]
        assert prompt.length - prompt.prefix_length > 8  # long enough that chunk 8 splits the question's part
        assert forwards == prefix_forwards + chunks(prompt.prefix_length, prompt.length, chunk) + decode_forwards
        assert answer.result.reused_prefix_tokens == prompt.prefix_length
    with recorded_forwards(loaded.model) as forwards:
        alone = pipeline.ask(loaded, document, QUESTIONS[0], settings, template, generation=generation)
    assert forwards == chunks(0, alone.prompt.length, chunk) + [(alone.prompt.length + step, 1) for step in range(2)]
    assert alone.result.reused_prefix_tokens == 0


def test_session_progress_and_times(loaded, notes):
    """What a session tells as it goes, and which answer carries the load and prefix times."""
    document, template = load_document(notes), load_template()
    settings = CompressionSettings(window_size=16, max_capacity_prompt=64)
    presenter = recording_presenter()
    session = pipeline.DocumentSession(loaded, document, settings, template,
                                       generation=GenerationOptions(max_new_tokens=2), progress=presenter)
    first, second = session.ask(QUESTIONS[0]), session.ask(QUESTIONS[1])
    prefix = first.prompt.prefix_length
    assert [event[1] for event in presenter.events] == [
        f"Reading the document: {prefix} tokens",
        f"Prefill: {first.prompt.length - prefix} tokens after the {prefix}-token prefix", "Answering: up to 2 tokens",
        f"Prefill: {second.prompt.length - prefix} tokens after the {prefix}-token prefix", "Answering: up to 2 tokens"]
    assert first.report.timings.load_s == round(loaded.load_seconds, 3) > 0 and second.report.timings.load_s == 0
    assert first.report.prefix.seconds > 0 and second.report.prefix.seconds == 0
    assert first.report.timings.prefix_s == first.report.prefix.seconds and second.report.timings.prefix_s == 0
    for answer in (first, second):  # an answer's wall time holds its prefix, prefill and decoding (rounded to ms)
        timings = answer.report.timings
        assert timings.wall_s >= timings.prefix_s + timings.prefill_s + timings.decode_s - 0.002
    presenter = recording_presenter()
    alone = pipeline.DocumentSession(loaded, document, settings, template, share_prefix=False,
                                     generation=GenerationOptions(max_new_tokens=2), progress=presenter)
    answer = alone.ask(QUESTIONS[0])
    assert [event[1] for event in presenter.events] == [f"Prefill: {answer.prompt.length} tokens",
                                                        "Answering: up to 2 tokens"]
    assert answer.report.prefix.seconds == 0 and answer.report.prefix.source == "prefill"


def test_truncated_document_gets_a_prefix_per_distinct_truncation(short_context_model_path):
    """A longer question truncates the document more: its prefix differs, and it still matches a separate run."""
    from snapkv_cli.models.loader import load_model

    loaded = load_model(short_context_model_path, device="cpu")
    document = Document(source="long", kind="text", pages=(Page(1, NOTES * 4),))
    settings = CompressionSettings(window_size=16, max_capacity_prompt=64, kernel_size=5)
    questions = ["Who?", "Who repaired the fog signal and oiled the clockwork before the great winter storm came?",
                 "Who?"]
    session = pipeline.DocumentSession(loaded, document, settings, load_template(), generation=GENERATION_4,
                                       truncate="middle")
    sources = []
    for question in questions:
        shared = session.ask(question)
        separate = pipeline.ask(loaded, document, question, settings, load_template(), generation=GENERATION_4,
                                truncate="middle")
        assert separate.prompt.truncated_document_tokens > 0
        assert_same_answer(separate, shared)
        sources.append(shared.report.to_json()["prefix"]["source"])
    assert sources == ["prefill", "prefill", "prefill"]


# --------------------------------------------------------------------------- snapkv ask with several questions


def test_jsonl_answers_match_separate_asks(notes, tiny_model_path):
    args = [notes, "--model", tiny_model_path, *SMALL]
    separate = [json.loads(ok("ask", notes, question, "--model", tiny_model_path, *SMALL, "--json", "--quiet").stdout)
                for question in QUESTIONS]
    result = ok("ask", *args, *[part for q in QUESTIONS for part in ("-Q", q)], "--json", "--quiet")
    assert result.stderr == ""
    lines = jsonl(result.stdout)
    assert len(lines) == len(QUESTIONS)
    for index, (line, alone) in enumerate(zip(lines, separate)):
        assert set(line) == set(alone)  # one question or several: the same keys
        assert {"question_index", "reused_prefix_tokens", "prefix", "doc_cache"} <= set(line)
        assert line["question"] == QUESTIONS[index] and line["question_index"] == index
        for key in ("answer", "prompt_tokens", "prompt", "generated_tokens", "cache", "layers", "settings"):
            assert line[key] == alone[key], key
        assert line["reused_prefix_tokens"] == (0 if index == 0 else line["prefix"]["tokens"])
        assert line["doc_cache"]["status"] == "off" and line["doc_cache"]["enabled"] is False
        assert line["timings"]["prefix_s"] >= 0


def test_text_output_and_reports(notes, tiny_model_path):
    base = [notes, "--model", tiny_model_path, *SMALL]
    answers = [json.loads(ok("ask", *base[:1], question, *base[1:], "--json", "--quiet").stdout)["answer"]
               for question in QUESTIONS[:2]]
    result = ok("ask", *base, "-Q", QUESTIONS[0], "--question", QUESTIONS[1])
    assert result.stdout == "".join(f"Q: {q}\n{a}\n\n" for q, a in zip(QUESTIONS[:2], answers))
    assert result.stderr.count("KV cache") == 1  # the full report once
    assert "[1/2]" in result.stderr and "[2/2]" in result.stderr and "prefix" in result.stderr
    assert "reused" in result.stderr.split("[2/2]")[1]
    # one question with -Q prints exactly the answer, as a plain ask does
    single = ok("ask", *base, "-Q", QUESTIONS[0], "--quiet")
    assert single.stdout == answers[0] + "\n"
    # a positional question comes first, then the -Q ones
    mixed = ok("ask", notes, QUESTIONS[1], "--model", tiny_model_path, *SMALL, "-Q", QUESTIONS[0], "--quiet")
    assert mixed.stdout == f"Q: {QUESTIONS[1]}\n{answers[1]}\n\nQ: {QUESTIONS[0]}\n{answers[0]}\n\n"


def test_questions_file_and_stdin(notes, tiny_model_path, tmp_path):
    base = [notes, "--model", tiny_model_path, *SMALL, "--json", "--quiet"]
    path = tmp_path / "questions.txt"
    path.write_text(f"\n{QUESTIONS[0]}\n   \n{QUESTIONS[1]}\n\n", encoding="utf-8")
    from_file = jsonl(ok("ask", *base, "--questions", str(path)).stdout)
    assert [line["question"] for line in from_file] == QUESTIONS[:2]
    from_stdin = jsonl(ok("ask", *base, "--questions", "-", input=path.read_text()).stdout)
    assert [line["answer"] for line in from_stdin] == [line["answer"] for line in from_file]
    # the document on stdin with the questions as options
    piped = jsonl(ok("ask", "--model", tiny_model_path, *SMALL, "--json", "--quiet", "-Q", QUESTIONS[0], "-Q",
                     QUESTIONS[1], input=NOTES).stdout)
    assert [line["answer"] for line in piped] == [line["answer"] for line in from_file]
    assert piped[0]["document"] == "<stdin>"


@pytest.mark.parametrize(("args", "input", "fragments"), [
    (["-", "--questions", "-"], "Who?\n", ["cannot come from stdin too", "file path"]),
    (["--questions", "-"], "Who?\n", ["cannot come from stdin too"]),
    (["{notes}", "--questions", "{empty}"], None, ["no questions in"]),
    (["{notes}", "--questions", "{missing}"], None, ["questions file not found"]),
    (["{notes}", "-Q", "Who?", "-Q", "  "], None, ["a question is empty"]),
])
def test_bad_questions(notes, tiny_model_path, tmp_path, args, input, fragments):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    paths = {"notes": notes, "empty": str(empty), "missing": str(tmp_path / "nope.txt")}
    result = invoke("ask", *[arg.format(**paths) for arg in args], "--model", tiny_model_path, input=input)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == "" and result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    for fragment in fragments:
        assert fragment in result.stderr


def test_questions_are_read_as_utf8_and_bad_bytes_do_not_stop_them(tmp_path):
    import io

    from snapkv_cli.cli.inputs import read_questions

    raw = "  Qui a écrit ça ?  \n\n\t\nWho? ".encode() + b"\xff\n"
    expected = ["Qui a écrit ça ?", "Who? \ufffd"]  # the stray byte is replaced, blank lines skipped
    path = tmp_path / "questions.txt"
    path.write_bytes(raw)
    assert read_questions(str(path)) == expected
    assert read_questions("-", stdin=io.BytesIO(raw)) == expected  # a binary stdin
    assert read_questions("-", stdin=io.StringIO("One?\r\nTwo?\n")) == ["One?", "Two?"]


def test_a_questions_file_is_utf8_whatever_the_locale_says(tmp_path):
    """Under an ASCII locale (no UTF-8 mode, no locale coercion) the file is still read as UTF-8."""
    import os
    import subprocess
    import sys

    path = tmp_path / "questions.txt"
    path.write_text("Qui a écrit ça ?\n", encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    code = ("import json, locale, sys; from snapkv_cli.cli.inputs import read_questions; "
            "print(json.dumps([locale.getpreferredencoding(False), read_questions(sys.argv[1])]))")
    done = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    encoding, questions = json.loads(done.stdout)
    assert encoding.lower() != "utf-8"  # the locale itself would not read it right
    assert questions == ["Qui a écrit ça ?"]


def test_a_questions_file_is_utf8_under_an_ascii_locale_set_while_running(tmp_path):
    """The same as above within this process: a C (ASCII) locale set at run time does not change how it reads."""
    import locale

    from snapkv_cli.cli.inputs import read_questions

    path = tmp_path / "questions.txt"
    path.write_text("Qui a écrit ça ?\n", encoding="utf-8")
    before = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")
        assert locale.getpreferredencoding(False).lower() != "utf-8"  # the locale itself would not read it right
        assert read_questions(str(path)) == ["Qui a écrit ça ?"]
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


def test_questions_that_cannot_be_read_say_what_is_wrong(tmp_path):
    import io

    from snapkv_cli.cli.inputs import read_questions
    from snapkv_cli.errors import UserError

    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\n", encoding="utf-8")
    cases = [(str(blank), None, f"no questions in {blank}: write one question per line"),
             ("-", io.StringIO("\n  \n"), "no questions in <stdin>: write one question per line"),
             (str(tmp_path / "none.txt"), None,
              f"questions file not found: {tmp_path / 'none.txt'}; give a text file with one question per line"),
             (str(tmp_path), None, f"questions file {tmp_path} is a directory; give a text file with one question "
                                   "per line"),
             (str(blank / "x"), None, f"cannot read questions file {blank / 'x'}: Not a directory")]
    for source, stdin, text in cases:
        with pytest.raises(UserError) as info:
            read_questions(source, stdin=stdin)
        assert str(info.value) == text


@pytest.mark.parametrize("argument, is_document", [
    ("/no/such/file", True), ("./no-such", True), ("../no-such", True), ("~/no-such", True),
    ("notes.PDF", True), ("notes", False), ("", False), ("Who wrote report.pdf", False),
    ("/no/such dir/notes.txt", False), ("What is ~ here?", False)])
def test_a_lone_argument_is_a_document_when_written_as_a_path(argument, is_document):
    """A path that does not exist yet still counts when it looks like one; anything with a space is a question."""
    from snapkv_cli.cli.inputs import names_a_document

    assert names_a_document(argument) is is_document


def test_too_many_positionals_is_a_usage_error(notes):
    result = invoke("ask", notes, "one", "two", "-Q", "three")
    assert result.exit_code == 2 and "Usage:" in result.stderr


# --------------------------------------------------------------------------- snapkv chat


def test_chat_answers_each_line(notes, tiny_model_path):
    base = [notes, "--model", tiny_model_path, *SMALL]
    answers = [json.loads(ok("ask", *base[:1], question, *base[1:], "--json", "--quiet").stdout)["answer"]
               for question in QUESTIONS[:2]]
    result = ok("chat", *base, input=f"{QUESTIONS[0]}\n\n   \n{QUESTIONS[1]}\n")
    assert result.stdout == "".join(f"{answer}\n" for answer in answers)
    assert "prompt tokens prefilled" in result.stderr
    assert "[1]" in result.stderr and "[2]" in result.stderr and "[3]" not in result.stderr
    as_json = jsonl(ok("chat", *base, "--json", "--quiet", input=f"{QUESTIONS[0]}\n{QUESTIONS[1]}").stdout)
    assert [line["answer"] for line in as_json] == answers
    assert [line["reused_prefix_tokens"] > 0 for line in as_json] == [True, True]
    assert ok("chat", *base, "--quiet", input="").stdout == ""  # end of input right away


def test_prefill_chunk_reaches_the_model_for_every_question_of_ask_and_chat(notes, tiny_model_path, monkeypatch):
    """``--prefill-chunk`` chunks the prefix and each question's own part, with ``-Q`` and in ``chat``."""
    args = [notes, "--model", tiny_model_path, "--max-new-tokens", "1", "--budget", "64", "--window", "16",
            "--prefill-chunk", "8", "--json", "--quiet"]
    for command, extra, input in (("ask", ["-Q", QUESTIONS[0], "-Q", QUESTIONS[1]], None),
                                  ("chat", [], f"{QUESTIONS[0]}\n{QUESTIONS[1]}\n")):
        forwards, _ = record_loaded_forwards(monkeypatch)
        answers = jsonl(ok(command, *args, *extra, input=input).stdout)
        prefix = answers[0]["prefix"]["tokens"]
        assert all(line["prefix"]["tokens"] == prefix for line in answers)
        assert all(line["prompt_tokens"] - prefix > 8 for line in answers), command
        questions = [part for line in answers for part in chunks(prefix, line["prompt_tokens"], 8)]
        expected = chunks(0, prefix, 8) + questions
        assert forwards == expected, command  # --max-new-tokens 1: no decode forward


def test_chat_ctrl_c_cancels_the_answer_and_goes_on(notes, tiny_model_path, monkeypatch):
    base = [notes, "--model", tiny_model_path, *SMALL]
    expected = json.loads(ok("ask", notes, QUESTIONS[1], *base[1:], "--json", "--quiet").stdout)["answer"]
    real = pipeline.generate_answer
    calls = []

    def interrupted_once(*args, on_text=None, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            on_text("partial")
            raise KeyboardInterrupt
        return real(*args, on_text=on_text, **kwargs)

    monkeypatch.setattr(pipeline, "generate_answer", interrupted_once)
    result = ok("chat", *base, input=f"{QUESTIONS[0]}\n{QUESTIONS[1]}\n")
    assert result.stdout == f"partial\n{expected}\n"
    assert "(answer cancelled)" in result.stderr.splitlines()  # its own line, as written


def test_chat_prints_a_question_error_and_goes_on(notes, short_context_model_path):
    """A question too long for the context is one ``Error:`` line; the next question is still answered."""
    base = [notes, "--model", short_context_model_path, *SMALL]
    expected = json.loads(ok("ask", notes, QUESTIONS[1], *base[1:], "--json", "--quiet").stdout)["answer"]
    too_long = "Who repaired the fog signal? " * 40  # far beyond the 512-token context with the document
    result = ok("chat", *base, input=f"{too_long}\n{QUESTIONS[1]}\n")
    assert result.stdout == f"{expected}\n"
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "tokens but at most" in errors[0] and "--truncate" in errors[0]


def test_chat_refuses_stdin_document(tiny_model_path):
    result = invoke("chat", "-", "--model", tiny_model_path, input="Who?\n")
    assert result.exit_code == 1 and "cannot come from stdin" in result.stderr


# --------------------------------------------------------------------------- the real default model


@pytest.mark.slow
def test_default_model_answers_and_keeps_the_same_as_separate_runs():
    from snapkv_cli.bench.grid import MethodGrid
    from snapkv_cli.defaults import CLI_DEFAULTS
    from snapkv_cli.models.loader import load_model

    loaded = load_model(device="cpu")
    document, template = load_document("examples/field_notes.txt"), load_template()
    settings = MethodGrid().settings(default_label(), CLI_DEFAULTS["max_capacity_prompt"])  # what `snapkv ask` runs
    questions = ["What is the station's coastguard code?", "What is the name of the relief boat?"]
    session = pipeline.DocumentSession(loaded, document, settings, template, generation=GENERATION_24)
    answers = []
    for question in questions:
        shared = session.ask(question)
        separate = pipeline.ask(loaded, document, question, settings, template, generation=GENERATION_24)
        assert shared.prompt.length > settings.max_capacity_prompt  # really compressed
        assert_same_answer(separate, shared)
        answers.append(shared.result.answer)
    assert "K-4417" in answers[0]


class _Terminal:
    """A terminal's stdin: ``lines`` then, if ``interrupt``, Ctrl-C at the prompt."""

    def __init__(self, lines, interrupt=False):
        self.lines, self.interrupt = list(lines), interrupt

    def isatty(self):
        return True

    def readline(self):
        if self.lines:
            return self.lines.pop(0)
        if self.interrupt:
            raise KeyboardInterrupt
        return ""


@pytest.mark.parametrize(("interrupt", "code"), [(False, 0), (True, 130)])
def test_chat_on_a_terminal_prompts_on_stderr_and_leaves(loaded, notes, interrupt, code):
    import io
    import re

    from rich.console import Console

    from snapkv_cli.answering.runner import Runner, RunOptions
    from snapkv_cli.cli.chat import run_chat
    from snapkv_cli.cli.presenters import ChatPresenter

    errors, answers = io.StringIO(), io.StringIO()
    settings = CompressionSettings(window_size=16, max_capacity_prompt=64, kernel_size=15, pooling="maxpool")
    options = RunOptions(device="cpu", settings=settings, generation=GENERATION_4)
    console = Console(file=errors, width=200, force_terminal=True, color_system="standard")
    runner = Runner(options, ChatPresenter(console, out=answers), load_model=lambda *args, **kwargs: loaded)
    result = run_chat(runner, load_document(notes), stdin=_Terminal([QUESTIONS[0] + "\n"], interrupt))
    assert result == code
    said = rf"{re.escape(notes)}: \d+ prompt tokens prefilled in \d+\.\d\ds\. Ask a question \(Ctrl-D to leave, " \
           r"Ctrl-C to stop an answer\)\.\n"
    assert re.search(said, errors.getvalue())  # as written: no number or path coloured on a colour terminal
    assert errors.getvalue().count("> ") == 2 and "Ctrl-D to leave" in errors.getvalue()
    assert errors.getvalue().endswith("\n> \n")  # leaving ends the prompt's line: the shell's starts on its own
    assert answers.getvalue().count("\n") == 1 and "> " not in answers.getvalue()


class _Pipe:
    """A stdin that is no terminal and cannot say so: ``lines`` then the end of input."""

    def __init__(self, lines):
        self.lines = list(lines)

    def readline(self):
        return self.lines.pop(0) if self.lines else ""


@pytest.mark.parametrize("closed", [False, True])
def test_chat_on_a_stdin_that_cannot_tell_it_is_a_terminal_shows_no_prompt(loaded, notes, closed):
    """A stdin without ``isatty`` (or whose ``isatty`` fails, as a closed file's does) is read as a pipe: no ``> ``
    prompt and no keys to tell."""
    import io
    import re

    from rich.console import Console

    from snapkv_cli.answering.runner import Runner, RunOptions
    from snapkv_cli.cli.chat import run_chat
    from snapkv_cli.cli.presenters import ChatPresenter

    stdin = _Pipe([QUESTIONS[0] + "\n"])
    if closed:
        closed_file = io.StringIO()
        closed_file.close()
        stdin.isatty = closed_file.isatty  # raises ValueError
    errors, answers = io.StringIO(), io.StringIO()
    settings = CompressionSettings(window_size=16, max_capacity_prompt=64, kernel_size=15, pooling="maxpool")
    options = RunOptions(device="cpu", settings=settings, generation=GENERATION_4)
    console = Console(file=errors, width=200)
    runner = Runner(options, ChatPresenter(console, out=answers), load_model=lambda *args, **kwargs: loaded)
    assert run_chat(runner, load_document(notes), stdin=stdin) == 0
    assert re.search(r" prompt tokens prefilled in \d+\.\d\ds\. Ask a question\.\n", errors.getvalue())
    assert "> " not in errors.getvalue()
    assert answers.getvalue().count("\n") == 1


def test_the_panel_of_several_questions_tells_the_document_prefill_and_each_answer_time(notes, tiny_model_path):
    result = runner.invoke(cli.app, ["ask", notes, "-Q", QUESTIONS[0], "-Q", QUESTIONS[1], "--model",
                                     tiny_model_path, *SMALL, "--json"])
    assert result.exit_code == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    shown = panel_text(result.stderr)
    prefix = first["prefix"]
    assert prefix["source"] == "prefill" and first["timings"]["prefix_s"] == prefix["seconds"] > 0
    assert (f"document ({prefix['tokens']} tokens) prefill {prefix['seconds']:.2f}s · question prefill "
            f"{first['timings']['prefill_s']:.2f}s") in shown  # the panel, for the first answer
    assert f"answer {first['timings']['wall_s']:.2f}s" in shown
    assert "[2/2] " in shown and f"answer {second['timings']['wall_s']:.2f}s" in shown  # the second's line
    for answer in (first, second):
        timings = answer["timings"]
        assert timings["wall_s"] >= timings["prefix_s"] + timings["prefill_s"] + timings["decode_s"] - 0.002


def test_chat_says_what_it_read_numbers_the_answers_and_goes_on_after_an_error(notes, tiny_model_path, tmp_path,
                                                                                doc_cache_dir, monkeypatch):
    from snapkv_cli.errors import UserError

    named = tmp_path / ("[b]" + "n" * 90 + ".txt")  # markup and a line wider than any terminal: as written
    named.write_text(pathlib.Path(notes).read_text(encoding="utf-8"), encoding="utf-8")
    base = [str(named), "--model", tiny_model_path, *SMALL]
    real = pipeline.generate_answer
    calls = []

    def failing_second(*args, on_text=None, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            on_text("partial")
            raise UserError("the question is [b]too long[/b]")
        return real(*args, on_text=on_text, **kwargs)

    monkeypatch.setattr(pipeline, "generate_answer", failing_second)
    questions = [QUESTIONS[0], QUESTIONS[1], QUESTIONS[0], QUESTIONS[1]]
    result = ok("chat", *base, "--cache-docs", input="\n".join(questions[:2]) + "\n\n" + "\n".join(questions[2:]))
    lines = result.stderr.splitlines()
    first = f"{named}: "
    assert lines[0].startswith(first) and " prompt tokens prefilled in " in lines[0]
    assert lines[0].endswith("s. Ask a question.")  # not a terminal: no keys to tell
    assert lines[1].startswith("document cache: stored (") and f" in {doc_cache_dir}" in lines[1]
    assert "Error: the question is [b]too long[/b]" in lines
    labels = [line.split()[0] for line in lines if line.startswith("[")]
    assert labels == ["[1]", "[3]", "[4]"]  # the failed question keeps its number
    assert result.stdout.splitlines()[1] == "partial"  # a cut answer ends its line
    assert len(result.stdout.splitlines()) == 4

    calls.clear()
    again = ok("chat", *base, "--cache-docs", input=QUESTIONS[0] + "\n")
    assert " prompt tokens loaded from the document cache in " in again.stderr.splitlines()[0]
    assert not any(line.startswith("document cache:") for line in again.stderr.splitlines())


def test_a_chat_error_is_printed_as_written_without_colours_even_on_a_terminal():
    import io

    from rich.console import Console

    from snapkv_cli.cli.presenters import ChatPresenter

    console = Console(file=io.StringIO(), width=20, force_terminal=True, color_system="standard")
    presenter = ChatPresenter(console, out=io.StringIO())
    message = "Error: the question has 4096 tokens [b]too many[/b] for 'x'"
    presenter.failed(message, 0)
    assert console.file.getvalue() == message + "\n"  # no markup read, no number highlighted, not wrapped


def test_chat_prepares_the_prefix_a_one_character_question_uses_even_when_the_document_is_truncated(
        short_context_model_path, tmp_path):
    """A truncated document leaves a longer question a shorter prefix; the one chat prepares before the first
    question is the shortest question's, so a one-character question reuses it as it is."""
    import re

    long = tmp_path / "long.txt"
    long.write_text("The keeper logged the weather at dawn and at dusk. " * 40, encoding="utf-8")  # > 512 tokens
    result = ok("chat", str(long), "--model", short_context_model_path, *SMALL, "--truncate", "middle", "--json",
                input="?\n")
    said = re.search(r": (\d+) prompt tokens prefilled in ", result.stderr.splitlines()[0])
    answer = json.loads(result.stdout.splitlines()[0])
    assert answer["prompt"]["truncated_document_tokens"] > 0
    assert answer["prefix"] == {"tokens": int(said.group(1)), "source": "memory", "seconds": 0.0,
                                "extended_tokens": 0}


@pytest.mark.parametrize("inputs, options, questions_file, terminal, refusal", [
    ([], None, None, True, "give a document, or pipe the document in"),
    (["notes.txt", "a", "b"], None, None, True,
     "expected DOC and at most one QUESTION, got 3 arguments (quote the question)"),
    (["notes.txt"], None, None, True, "give a question about notes.txt (QUESTION, --question or --questions FILE)"),
    ([], None, None, False, "give a question (QUESTION, --question or --questions FILE)"),
])
def test_what_is_missing_from_the_arguments_is_said_against_them(monkeypatch, inputs, options, questions_file,
                                                                   terminal, refusal):
    import typer

    from snapkv_cli.cli import inputs as reading

    monkeypatch.setattr(reading, "_stdin_is_terminal", lambda: terminal)
    with pytest.raises(typer.BadParameter) as refused:
        reading.document_and_questions(inputs, options, questions_file)
    assert (refused.value.message, refused.value.param_hint) == (refusal, "DOC QUESTION")


def test_questions_come_in_order_and_stdin_serves_one_of_document_and_questions(monkeypatch, tmp_path):
    from snapkv_cli.cli import inputs as reading
    from snapkv_cli.errors import UserError

    monkeypatch.setattr(reading, "_stdin_is_terminal", lambda: True)  # stdin is not read: DOC "-" is the refusal
    listed = tmp_path / "questions.txt"
    listed.write_text("Third?\nFourth?\n", encoding="utf-8")
    assert reading.document_and_questions(["notes.txt", "First?"], ["Second?"], str(listed)) == (
        "notes.txt", ["First?", "Second?", "Third?", "Fourth?"])
    with pytest.raises(UserError) as both:
        reading.document_and_questions([], None, "-")
    assert str(both.value) == ("--questions - reads the questions from stdin, so the document cannot come from stdin "
                               "too: give the document as a file path")
    with pytest.raises(UserError) as empty:
        reading.document_and_questions(["notes.txt", "  "])
    assert str(empty.value) == "a question is empty: every question needs some text"


def test_each_answers_report_line_is_one_line_and_json_lines_keep_their_characters(notes, tiny_model_path):
    base = [notes, "--model", tiny_model_path, *SMALL]
    text = ok("ask", *base, "-Q", QUESTIONS[0], "-Q", QUESTIONS[1]).stderr
    line = next(line for line in text.splitlines() if line.startswith("[2/2]"))
    assert len(line) > 80 and "prefix" in line and " · answer " in line  # not wrapped at the terminal's width
    lines = ok("ask", *base, "-Q", "Où est le phare ?", "-Q", QUESTIONS[0], "--json", "--quiet").stdout
    assert '"question": "Où est le phare ?"' in lines  # not \u00f9
