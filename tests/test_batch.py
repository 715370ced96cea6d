"""``snapkv batch``: jobs, the resumable output, and answers equal to ``snapkv ask --json``'s.

The tiny random model answers gibberish: these tests check mechanics (what is asked, what is written once and only
once, what a rerun skips), never the content of an answer. The Ray executor has its own file (test_batch_ray.py).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import snapkv_cli.cli as cli
from snapkv_cli.batch.jobs import Job, expand_documents, jobs_from_paths, read_jobs
from snapkv_cli.batch.output import AnswerFile, encode
from snapkv_cli.batch.presenter import BatchPresenter
from snapkv_cli.errors import BadJob, OutputInUse, UserError
from tests.example_writer import make_examples
from tests.fake_ray import FakeRay
from tests.helpers import assert_user_error, record_loaded_forwards

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
NOTES = (
    "Skerrow Point Light, winter log.\n\n"
    "The lamp was lit at dusk and the wind came round to the north-west by midnight. "
    "Duncan Hale repaired the fog signal and oiled the clockwork before the storm. "
    "The relief boat Morven Lass arrived on Tuesday with coal, letters and fresh bread.\n\n"
    "Agnes Tolland counted 117 steps up to the lamp room; the coastguard code is K-4417.\n"
)
PDF_PAGES = ["# Page one\n\nThe harbour office opens at seven. The first ferry leaves at eight.",
             "# Page two\n\nThe warehouse at Saltmarsh Gate holds frozen food for the winter season.",
             "# Page three\n\nThe annual meeting is held on 14 May in the old customs house by the quay."]
QUESTIONS = ["Who repaired the fog signal?", "What is the coastguard code?"]
SMALL = ["--max-new-tokens", "4", "--budget", "48", "--window", "16"]

pytestmark = pytest.mark.usefixtures("doc_cache_dir", "one_thread")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("corpus")
    files = {"notes.txt": NOTES.encode(), "log.md": ("# Log\n\n" + NOTES[200:] + NOTES[:200]).encode(),
             "report.pdf": make_examples.pdf_bytes(PDF_PAGES), "broken.pdf": b"%PDF-1.4\n(((( broken"}
    paths = {}
    for name, data in files.items():
        (folder / name).write_bytes(data)
        paths[name] = str(folder / name)
    return paths


def invoke(*args, input=None):
    return runner.invoke(cli.app, [str(arg) for arg in args], input=input)


def jsonl(text: str) -> list[dict]:
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def ask_lines(*args) -> list[dict]:
    result = invoke("ask", *args, "--json", "--quiet")
    assert result.exit_code == 0, (result.stderr, result.exception)
    return jsonl(result.stdout)


def comparable(line: dict, *also: str) -> dict:
    """``line`` without what two runs of the same question measure differently (times, memory) and ``also``."""
    kept = {key: value for key, value in line.items() if key not in ("timings", "memory", *also)}
    if "prefix" in kept:
        kept["prefix"] = {key: value for key, value in kept["prefix"].items() if key != "seconds"}
    return kept


# --------------------------------------------------------------------------- jobs


def test_documents_from_files_folders_and_globs(tmp_path, monkeypatch):
    for name in ("a.txt", "b.PDF", "sub/c.md", "sub/deep/d.html", ".hidden/e.txt", "sub/.f.txt", "notes.docx"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("text")
    monkeypatch.chdir(tmp_path)
    assert expand_documents(["."]) == ["a.txt", "b.PDF", "sub/c.md", "sub/deep/d.html"]
    assert expand_documents(["sub/**/*.*"]) == ["sub/c.md", "sub/deep/d.html"]
    # a file is taken as given (its kind is sniffed when read), repeats are dropped, a missing file is kept
    assert expand_documents(["notes.docx", "a.txt", "sub", "a.txt", "missing.txt"]) == [
        "notes.docx", "a.txt", "sub/c.md", "sub/deep/d.html", "missing.txt"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no documents in the folder empty"):
        expand_documents(["empty"])
    with pytest.raises(UserError, match=r"no files match \*\.rtf"):
        expand_documents(["*.rtf"])
    jobs = jobs_from_paths(["a.txt", "sub/c.md"], [" Who? ", "What?", "Who?"])
    assert jobs == [Job("a.txt", "a.txt", ("Who?", "What?")), Job("sub/c.md", "sub/c.md", ("Who?", "What?"))]
    with pytest.raises(UserError, match="no questions"):
        jobs_from_paths(["a.txt"], [])


def test_jobs_file(tmp_path):
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"id": "acme", "document": "acme.pdf", "questions": ["Revenue?", "Auditor?"], "pages": "1-3"}\n'
                    "\n"
                    '{"id": 7, "document": "b.txt", "question": "Who?", "truncate": "middle", "template": "summary"}\n'
                    '{"document": "c.txt"}\n')
    acme, seven, default = read_jobs(str(path), ["Default?"])
    assert acme == Job("acme", "acme.pdf", ("Revenue?", "Auditor?"), pages="1-3")
    assert (seven.id, seven.questions, seven.truncate, seven.template.name) == (7, ("Who?",), "middle", "summary")
    assert (default.id, default.questions) == ("c.txt", ("Default?",))  # the id defaults to the document
    import io

    assert read_jobs("-", stdin=io.StringIO(path.read_text()), default_questions=["D?"])[0] == acme


KEYS = "id, document, question, questions, pages, truncate, template"


@pytest.mark.parametrize("line, reason", [
    ("not json", "not JSON (Expecting value); write one JSON object per line"),
    ('{"document": "a.txt",', "not JSON (Expecting property name enclosed in double quotes); write one JSON object "
                              "per line"),
    ("[1, 2]", "not a JSON object; write one object per line"),
    ('"a.txt"', "not a JSON object; write one object per line"),
    ('{"document": "a.txt", "pages": "1", "colour": "red", "size": 2}', f"unknown key 'colour': a job has {KEYS}"),
    ('{"question": "Who?"}', "no document: every job needs a document path"),
    ('{"document": 5, "question": "Who?"}', "document must be a non-empty string, got 5"),
    ('{"document": " ", "question": "Who?"}', 'document must be a non-empty string, got " "'),
    ('{"document": "a.txt"}', "no question: give question or questions, or questions for every job"),
    ('{"document": "a.txt", "question": "Who?", "questions": ["What?"]}', "give question or questions, not both"),
    ('{"document": "a.txt", "questions": []}', "questions must be a non-empty list of strings"),
    ('{"document": "a.txt", "questions": "Who?"}', "questions must be a non-empty list of strings"),
    ('{"document": "a.txt", "questions": ["Who?", 3]}', "every question must be a non-empty string, got 3"),
    ('{"document": "a.txt", "questions": ["Who?", ""]}', 'every question must be a non-empty string, got ""'),
    ('{"document": "a.txt", "question": " "}', 'question must be a non-empty string, got " "'),
    ('{"document": "a.txt", "question": 12}', "question must be a non-empty string, got 12"),
    ('{"document": "a.txt", "question": ["Who?"]}', 'question must be a non-empty string, got ["Who?"]'),
    ('{"id": true, "document": "a.txt", "question": "Who?"}', "id must be a string or an integer, got true"),
    ('{"id": "", "document": "a.txt", "question": "Who?"}', 'id must be a string or an integer, got ""'),
    ('{"id": 1.5, "document": "a.txt", "question": "Who?"}', "id must be a string or an integer, got 1.5"),
    ('{"id": null, "document": "a.txt", "question": "Who?"}', "id must be a string or an integer, got null"),
    ('{"id": "first", "document": "b.txt", "question": "Who?"}', 'id "first" is already used on line 1'),
    ('{"document": "first", "question": "Who?"}', 'id "first" is already used on line 1'),  # the document's id
    ('{"id": 7, "document": "c.txt", "question": "Who?"}', "id 7 is already used on line 2"),
    ('{"document": "a.txt", "question": "Who?", "truncate": "sideways"}',
     'truncate must be one of middle, start, end, got "sideways"'),
    ('{"document": "a.txt", "question": "Who?", "truncate": 1}', "truncate must be one of middle, start, end, got 1"),
    ('{"document": "a.txt", "question": "Who?", "template": 5}', "template must be a non-empty string, got 5"),
    ('{"document": "a.txt", "question": "Who?", "pages": true}', "pages must be a non-empty string, got true"),
    ('{"document": "a.txt", "question": "Who?", "pages": 2.5}', "pages must be a non-empty string, got 2.5"),
    ('{"document": "a.txt", "question": "Who?", "pages": ""}', 'pages must be a non-empty string, got ""'),
])
def test_bad_jobs_name_their_line(tmp_path, line, reason):
    """Every rule of a jobs line, with its whole message and the line it names (blank lines count: they are lines
    of the file)."""
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"document": "first", "question": "Who?"}\n'
                    '{"id": 7, "document": "b.txt", "question": "Who?"}\n'
                    "\n" + line + "\n"
                    '{"id": "later", "document": "z.txt", "question": "Who?"}\n')
    with pytest.raises(BadJob) as caught:
        read_jobs(str(path))
    assert str(caught.value) == f"{path} line 4: {reason}"
    assert (caught.value.source, caught.value.line, caught.value.reason) == (str(path), 4, reason)


@pytest.mark.parametrize("line, fragment", [
    ('{"document": "a.txt", "question": "Who?", "template": "no-such-template"}', "unknown template"),
    ('{"document": "a.txt", "question": "Who?", "pages": "x"}', "invalid page selection 'x'"),
    ('{"document": "a.txt", "question": "Who?", "pages": "3-1"}', "range 3-1 is reversed"),
    ('{"document": "a.txt", "question": "Who?", "pages": 0}', "pages are numbered from 1"),
])
def test_a_job_s_bad_pages_or_template_is_refused_with_ask_s_reason(tmp_path, line, fragment):
    """The reason of a job's pages or template is the one ask gives for the same flag value; the line is named."""
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n" + line + "\n")
    with pytest.raises(BadJob) as caught:
        read_jobs(str(path))
    assert str(caught.value).startswith(f"{path} line 2: ") and fragment in caught.value.reason
    assert caught.value.line == 2


def test_bad_jobs_on_stdin_name_stdin(monkeypatch):
    import io

    with pytest.raises(BadJob) as caught:
        read_jobs("-", stdin=io.StringIO('{"document": "a.txt", "question": "Who?"}\n{"document": "b.txt"}\n'))
    assert str(caught.value) == ("<stdin> line 2: no question: give question or questions, or questions for every "
                                 "job")
    # without a stream given, the process's stdin
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"document": "a.txt"}\n'))
    assert read_jobs("-", ["Who?"]) == [Job("a.txt", "a.txt", ("Who?",))]


def test_a_jobs_line_s_values_as_read(tmp_path):
    """What a valid line becomes: text stripped, questions distinct in the order asked, a number of pages as text,
    null options as not given, the id (a string or an integer, 0 included) defaulting to the document."""
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(json.dumps(job) for job in [
        {"document": "  a.txt ", "questions": [" Who? ", "What?", "Who?", "What? "], "pages": 2},
        {"id": 0, "document": "b.txt", "question": " Why? ", "pages": " 1-3 ", "truncate": None, "template": None},
        {"id": "0", "document": "c.txt", "pages": None, "truncate": "end", "template": " qa_base "},
        {"id": "d", "document": "d.txt", "questions": ["Own?"]},
    ]) + "\n\n  \n")
    a, b, c, d = read_jobs(str(path), [" Default? ", "Other?", "Default?"])
    assert a == Job("a.txt", "a.txt", ("Who?", "What?"), pages="2")
    assert b == Job(0, "b.txt", ("Why?",), pages="1-3")
    assert (c.id, c.document, c.questions, c.pages, c.truncate) == ("0", "c.txt", ("Default?", "Other?"), None, "end")
    assert c.template.name == "qa_base"
    assert d == Job("d", "d.txt", ("Own?",))  # a job's own questions replace the run's


@pytest.mark.parametrize("write, message", [
    (None, "jobs file not found: {path}; give a JSONL file with one job per line"),
    ("folder", "jobs file {path} is a folder; give a JSONL file with one job per line"),
    (b"", "no jobs in {path}: write one JSON object per line"),
    (b"\n  \n\n", "no jobs in {path}: write one JSON object per line"),
    ("under a file", "cannot read jobs file {path}: Not a directory"),
    (b'{"document": "caf\xe9.txt"}\n',
     "cannot read jobs file {path}: 'utf-8' codec can't decode byte 0xe9 in position 17: invalid continuation byte"),
])
def test_a_jobs_file_that_cannot_be_read(tmp_path, write, message):
    path = tmp_path / "jobs.jsonl"
    if write == "folder":
        path.mkdir()
    elif write == "under a file":
        (tmp_path / "notes.txt").write_text("notes")
        path = tmp_path / "notes.txt" / "jobs.jsonl"
    elif write is not None:
        path.write_bytes(write)
    with pytest.raises(UserError) as caught:
        read_jobs(str(path), ["Who?"])
    assert str(caught.value) == message.format(path=path)


def test_a_jobs_file_is_read_as_utf8_whatever_the_locale(tmp_path):
    path = tmp_path / "jobs.jsonl"
    path.write_bytes('{"document": "café.txt", "question": "Où?"}\n'.encode())
    assert read_jobs(str(path)) == [Job("café.txt", "café.txt", ("Où?",))]
    code = ("import sys; from snapkv_cli.batch.jobs import read_jobs; (job,) = read_jobs(sys.argv[1]); "
            "print(ascii((job.document, job.questions)))")
    environment = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}  # an ASCII locale
    result = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, env=environment, capture_output=True,
                            timeout=120)
    assert result.stdout == b"('caf\\xe9.txt', ('O\\xf9?',))\n", result.stderr


def test_documents_and_questions_given_as_paths_are_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("text")
    (tmp_path / "[draft].txt").write_text("text")  # a file whose name looks like a glob is taken as it is
    (tmp_path / "folder.md").mkdir()  # a folder named like a document is not one
    (tmp_path / "folder.md" / "inner.txt").write_text("text")
    assert expand_documents(["[draft].txt"]) == ["[draft].txt"]
    with pytest.raises(UserError) as caught:
        expand_documents(["a.txt", "*.md"])  # a glob matches files only
    assert str(caught.value) == "no files match *.md"
    (tmp_path / "b.md").write_text("text")
    assert expand_documents(["a.txt", "*.md", "[draft].txt"]) == ["a.txt", "b.md", "[draft].txt"]
    (tmp_path / "empty" / ".hidden").mkdir(parents=True)
    (tmp_path / "empty" / ".hidden" / "e.txt").write_text("text")
    (tmp_path / "empty" / "notes.docx").write_text("text")
    with pytest.raises(UserError) as caught:
        expand_documents(["empty"])
    assert str(caught.value) == "no documents in the folder empty: it holds no PDF, .txt, .md or .html files"
    with pytest.raises(UserError) as caught:
        expand_documents(["a.txt", "-"])
    assert str(caught.value) == ("a batch reads its documents from files: give their paths, or a jobs file (- for jobs"
                                 " on stdin)")
    with pytest.raises(UserError) as caught:
        jobs_from_paths([], ["Who?"])
    assert str(caught.value) == "no documents: give files, folders or globs, or a jobs file"
    with pytest.raises(UserError) as caught:
        jobs_from_paths(["a.txt"], [])
    assert str(caught.value) == "no questions: give the questions to ask of every document"
    with pytest.raises(UserError) as caught:
        jobs_from_paths(["a.txt"], ["Who?", "  "])
    assert str(caught.value) == "a question is empty: every question needs some text"


# --------------------------------------------------------------------------- the resumable output


def answer(job_id, question, **more) -> dict:
    return {"id": job_id, "answer": "x", "question": question, **more}


def test_output_resumes_and_repairs_an_unfinished_last_line(tmp_path):
    path = tmp_path / "out.jsonl"
    lines = [answer("a", "Q1"), answer(2, "Q1"), {"id": "b", "question": "Q1", "error": "broken"}]
    whole = b"".join(encode(line) for line in lines)
    unfinished = encode(answer("b", "Q2"))[:-9]  # a write that a kill cut short
    path.write_bytes(whole + unfinished)
    out = AnswerFile(str(path))
    assert out.answered == {("a", "Q1"), (2, "Q1")}  # an error line is a record, not an answer
    assert out.earlier_errors == 1 and out.repaired_bytes == len(unfinished)
    out.write(answer("b", "Q2"))
    out.close()
    assert path.read_bytes() == whole + encode(answer("b", "Q2"))  # no earlier line changed, the tail is gone

    # a whole object that lost only its newline is a line: it gets its newline, nothing is cut
    path.write_bytes(whole + encode(answer("c", "Q1"))[:-1])
    out = AnswerFile(str(path))
    assert ("c", "Q1") in out.answered and out.repaired_bytes == 0
    out.close()
    assert path.read_bytes() == whole + encode(answer("c", "Q1"))


def test_output_resumes_a_file_of_several_mebibytes(tmp_path, deadline):
    """A long batch's output is read whole, however it falls into the reader's chunks (1 MiB each), and in bounded
    time: 2.5 MiB of lines with answers of 1,000 characters."""
    deadline(10)
    path = tmp_path / "out.jsonl"
    lines = [{**answer(f"doc{number}", "Q1"), "answer": "y" * 1000} for number in range(2600)]
    whole = b"".join(encode(line) for line in lines)
    assert len(whole) > 2.5 * (1 << 20)
    path.write_bytes(whole)
    out = AnswerFile(str(path))
    assert out.answered == {(f"doc{number}", "Q1") for number in range(2600)} and out.repaired_bytes == 0
    out.close()
    assert path.read_bytes() == whole


def test_output_refuses_a_foreign_file_and_a_second_writer(tmp_path):
    foreign = tmp_path / "notes.txt"
    foreign.write_text("Dear diary,\nnot JSON\n")
    with pytest.raises(UserError, match="line 1 is not a JSON object"):
        AnswerFile(str(foreign))
    assert foreign.read_text() == "Dear diary,\nnot JSON\n"  # untouched
    first = AnswerFile(str(tmp_path / "out.jsonl"))
    with pytest.raises(OutputInUse) as caught:
        AnswerFile(str(tmp_path / "out.jsonl"))
    assert str(caught.value) == (f"{tmp_path / 'out.jsonl'} is being written by another snapkv batch; wait for it, "
                                 "or write to another file")
    first.close()
    AnswerFile(str(tmp_path / "out.jsonl")).close()


def test_output_lines_are_compact_utf8_json(tmp_path, capsys):
    """A line is written as UTF-8 text (not \\u escapes), one JSON object and its newline, to a file or stdout."""
    from snapkv_cli.batch.output import StreamOutput

    line = {"id": "café", "question": "Où?", "answer": "Zürich", "n": [1, 2]}
    expected = '{"id": "café", "question": "Où?", "answer": "Zürich", "n": [1, 2]}\n'
    assert encode(line) == expected.encode("utf-8")
    out = AnswerFile(str(tmp_path / "out.jsonl"))
    out.write(line)
    out.close()
    out.close()  # closing twice is harmless: no other file is closed
    os.fstat(1)
    assert (tmp_path / "out.jsonl").read_bytes() == expected.encode("utf-8")
    stream = StreamOutput()  # stdout
    assert (stream.path, stream.repaired_bytes, stream.answered) == (None, 0, set())
    stream.write(line)
    stream.close()
    assert capsys.readouterr().out == expected


def test_output_counts_what_a_rerun_skips_and_keeps(tmp_path):
    """Only answer lines are skipped by a rerun, by (id, question); error lines are counted; blank lines are
    ignored; a tail of blanks after the last line is dropped and is not counted as repaired."""
    path = tmp_path / "out.jsonl"
    lines = [answer("a", "Q1"), {"id": "a", "question": "Q2", "error": "x"}, answer("a", "Q3", error="y"),
             {"id": "b", "question": "Q1"}, answer(1, "Q1"), answer("1", "Q2"), {"id": "c", "error": "z"}]
    data = b"".join(encode(line) for line in lines[:3]) + b"\n  \n" + b"".join(encode(line) for line in lines[3:])
    path.write_bytes(data + b"  \t")
    out = AnswerFile(str(path))
    assert out.answered == {("a", "Q1"), (1, "Q1"), ("1", "Q2")}
    assert (out.earlier_errors, out.repaired_bytes) == (3, 0)
    out.close()
    assert path.read_bytes() == data


def test_output_reads_a_file_of_several_megabytes(tmp_path):
    """The answers of a long earlier run (lines longer than any read buffer included) are all found."""
    path = tmp_path / "out.jsonl"
    lines = [answer(f"doc{number:06}", f"Q{number:06}", answer=number) for number in range(40_000)]
    lines.insert(20_000, answer("huge", "Q", answer="z" * 2_500_000))
    path.write_bytes(b"".join(encode(line) for line in lines))
    out = AnswerFile(str(path))
    assert out.answered == {(line["id"], line["question"]) for line in lines}
    out.close()


def test_output_that_cannot_be_opened(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(UserError) as caught:
        AnswerFile(str(folder))
    assert str(caught.value) == f"the output {folder} is a folder; give a file path"
    missing = tmp_path / "no" / "out.jsonl"
    with pytest.raises(UserError) as caught:
        AnswerFile(str(missing))
    assert str(caught.value) == f"cannot open the output {missing}: No such file or directory"


def test_output_refused_for_a_bad_line_names_it_and_lets_the_file_go(tmp_path):
    """A line that is not a JSON object names its line number (blank lines count); the file is not held after the
    refusal, so once mended it opens."""
    path = tmp_path / "out.jsonl"
    good = encode(answer("a", "Q1"))
    path.write_bytes(good + b"\n" + b"[1, 2]\n" + encode(answer("b", "Q1")))
    with pytest.raises(UserError) as caught:
        AnswerFile(str(path))
    assert str(caught.value) == (f"{path} line 3 is not a JSON object, so it was not written by snapkv batch; give "
                                 "another output file")
    path.write_bytes(good)
    out = AnswerFile(str(path))
    assert out.answered == {("a", "Q1")}
    out.close()


def test_an_output_opened_as_the_first_descriptor_is_let_go(tmp_path):
    """In a process started with its stdin closed the output gets descriptor 0: closing it still lets the file go."""
    saved = os.dup(0)
    try:
        os.close(0)
        first = AnswerFile(str(tmp_path / "out.jsonl"))
        assert first.fd == 0
        first.close()
        AnswerFile(str(tmp_path / "out.jsonl")).close()
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_a_new_output_file_is_readable_by_others(tmp_path):
    import stat

    umask = os.umask(0o022)
    try:
        AnswerFile(str(tmp_path / "out.jsonl")).close()
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "out.jsonl").stat().st_mode) == 0o644


# --------------------------------------------------------------------------- lines, summary, driver


def test_an_error_line_names_the_job_the_question_and_the_error():
    from snapkv_cli.batch.lines import describe_error, error_line

    job = Job(7, "docs/a.txt", ("Q0", "Q1"))
    assert list(error_line(job, 1, "Q1", "it broke").items()) == [
        ("id", 7), ("document", "docs/a.txt"), ("question", "Q1"), ("question_index", 1), ("error", "it broke")]
    assert describe_error(UserError("file not found: a.txt")) == "file not found: a.txt"
    assert describe_error(ValueError("bad\n   value\there ")) == "ValueError: bad value here"
    assert describe_error(KeyError("k")) == "KeyError: 'k'"


def answer_of(job_id, question, index=0, *, prompt, reused, generated, times, before, after):
    """An answer line with the fields the summary counts (the rest of ask's object left out)."""
    return {"id": job_id, "question": question, "question_index": index, "answer": "x", "prompt_tokens": prompt,
            "reused_prefix_tokens": reused, "generated_tokens": generated,
            "timings": dict(zip(("prefix_s", "prefill_s", "decode_s", "load_s"), times)),
            "cache": {"bytes_before": before, "bytes_after": after}}


def test_the_summary_s_numbers():
    from snapkv_cli.batch.summary import BatchSummary

    summary = BatchSummary(documents=3, questions=5, skipped_documents=1, skipped_questions=2, workers=2,
                           started=100.0)
    assert summary.seconds_per_question is None and summary.done == 0
    summary.record(answer_of("a", "Q1", prompt=300, reused=0, generated=7, times=(0.25, 0.5, 1.0, 9.0), before=4000,
                             after=1000))
    summary.record({"id": "a", "question": "Q2", "question_index": 1, "error": "broken"})
    summary.record(answer_of("b", "Q1", prompt=320, reused=290, generated=3, times=(0.0, 0.125, 0.25, 0.0),
                             before=5000, after=1500))
    summary.documents_done, summary.worker_failures = 1, 1
    summary.finished = 104.0
    assert (summary.answered, summary.failed, summary.done) == (2, 1, 3)
    assert summary.tokens == (300 + 7) + (320 - 290 + 3)
    assert summary.answer_seconds == 0.25 + 0.5 + 1.0 + 0.125 + 0.25  # load times are not the answers'
    assert (summary.seconds, summary.seconds_per_question, summary.tokens_per_second) == (4.0, 2.0, 340 / 4)
    assert summary.kv_bytes_saved == (4000 + 5000) - (1000 + 1500)
    assert summary.to_json() == {
        "documents": 3, "questions": 5, "skipped_documents": 1, "skipped_questions": 2, "workers": 2,
        "documents_done": 1, "answered": 2, "failed": 1, "worker_failures": 1, "tokens": 340, "seconds": 4.0,
        "answer_seconds": 2.125, "kv_bytes_before": 9000, "kv_bytes_after": 2500}
    summary.finished, summary.answer_seconds = 100.123456, 1.0004
    assert summary.to_json()["seconds"] == 0.123 and summary.to_json()["answer_seconds"] == 1.0
    summary.finished = 100.0  # no time at all: no rate rather than a division by zero
    assert summary.tokens_per_second == 0.0


def test_a_running_summary_counts_time_until_now():
    from snapkv_cli.batch.summary import BatchSummary

    before = time.perf_counter()
    summary = BatchSummary()
    time.sleep(0.01)
    assert 0.01 <= summary.seconds <= time.perf_counter() - before


def test_plan_skips_answered_questions_and_keeps_their_places():
    from snapkv_cli.batch.driver import plan

    jobs = [Job("a", "a.txt", ("Q0", "Q1", "Q2")), Job("b", "b.txt", ("Q0",)), Job(3, "c.txt", ("Q0", "Q1")),
            Job("e", "e.txt", ("Q0", "Q1"))]
    answered = {("a", "Q1"), ("b", "Q0"), ("3", "Q0"), ("c.txt", "Q1"), ("z", "Q0"), ("e", "Q1"), ("e", "Q0")}
    tasks, skipped_documents, skipped_questions = plan(jobs, answered)
    assert [(task.job.id, task.questions, task.attempt) for task in tasks] == [
        ("a", ((0, "Q0"), (2, "Q2")), 1), (3, ((0, "Q0"), (1, "Q1")), 1)]
    assert (skipped_documents, skipped_questions) == (2, 4)


class Events(BatchPresenter):
    """What a batch tells its presenter, in order."""

    def __init__(self):
        self.events: list[tuple] = []

    def started(self, summary) -> None:
        self.events.append(("started", summary.documents, summary.questions, summary.skipped_documents,
                            summary.skipped_questions, summary.workers))

    def recorded(self, line: dict, summary) -> None:
        self.events.append(("line", line["id"], line["question"], "error" in line, summary.done,
                            summary.documents_done))

    def worker_failed(self, message: str, summary) -> None:
        self.events.append(("worker failed", message, summary.worker_failures))

    def progress(self, message: str) -> None:
        self.events.append(("progress", message))

    def phase(self, name: str, total, unit: str) -> None:
        self.events.append(("phase", name))

    def question(self, question: str, index: int, total) -> None:
        self.events.append(("question", question[:10], index))

    def finished(self, summary) -> None:
        self.events.append(("finished", summary.finished is not None, summary.done))

    def close(self) -> None:
        self.events.append(("closed",))


class Scripted:
    """An executor that answers every question at once, except those of a job whose id starts with "broken" (error
    lines), and reports a worker dead after each other job; ``twice``: it gives the first question two lines."""

    def __init__(self, workers: int = 1, twice: bool = False):
        self.workers, self.twice, self.given = workers, twice, None

    def run(self, tasks, recorder) -> None:
        self.given = [(task.job.id, task.questions) for task in tasks]
        recorder.status("working")
        for task in tasks:
            if str(task.job.id).startswith("broken"):
                recorder.fail(task, "it broke")
                continue
            for index, question in task.questions:
                line = {"id": task.job.id, "question": question, "question_index": index, "answer": "x",
                        "prompt_tokens": 10, "reused_prefix_tokens": 4, "generated_tokens": 2,
                        "timings": {"prefix_s": 0.0, "prefill_s": 0.5, "decode_s": 0.25, "load_s": 0.0},
                        "cache": {"bytes_before": 100, "bytes_after": 40}}
                recorder.line(line)
                if self.twice:
                    recorder.line(line)
            recorder.worker_failed(f"worker of {task.job.id} died")


def test_run_batch_writes_counts_and_tells_every_line_once(tmp_path):
    """The driver skips what the output answers, hands the rest out, writes each line once, and counts a document
    done when its last question has a line; the presenter hears it all, the end included."""
    from snapkv_cli.batch.driver import run_batch

    path = tmp_path / "out.jsonl"
    path.write_bytes(encode(answer("a", "Q0")) + encode(answer("c", "Q0")) + encode(answer("c", "Q1")))
    jobs = [Job("a", "a.txt", ("Q0", "Q1", "Q2")), Job("broken", "b.txt", ("Q0", "Q1")),
            Job("c", "c.txt", ("Q0", "Q1")), Job("d", "d.txt", ("Q0",))]
    out, presenter, executor = AnswerFile(str(path)), Events(), Scripted(workers=3)
    summary = run_batch(jobs, executor, out, presenter)
    out.close()
    assert executor.given == [("a", ((1, "Q1"), (2, "Q2"))), ("broken", ((0, "Q0"), (1, "Q1"))), ("d", ((0, "Q0"),))]
    assert presenter.events == [
        ("started", 3, 5, 1, 3, 3), ("progress", "working"),
        ("line", "a", "Q1", False, 1, 0), ("line", "a", "Q2", False, 2, 1), ("worker failed", "worker of a died", 1),
        ("line", "broken", "Q0", True, 3, 1), ("line", "broken", "Q1", True, 4, 2),
        ("line", "d", "Q0", False, 5, 3), ("worker failed", "worker of d died", 2), ("finished", True, 5),
        ("closed",)]
    written = jsonl(path.read_text())[3:]
    assert [(line["id"], line["question"], line["question_index"]) for line in written] == [
        ("a", "Q1", 1), ("a", "Q2", 2), ("broken", "Q0", 0), ("broken", "Q1", 1), ("d", "Q0", 0)]
    assert written[2] == {"id": "broken", "document": "b.txt", "question": "Q0", "question_index": 0,
                          "error": "it broke"}
    assert summary.to_json() | {"seconds": None} == {
        "documents": 3, "questions": 5, "skipped_documents": 1, "skipped_questions": 3, "workers": 3,
        "documents_done": 3, "answered": 3, "failed": 2, "worker_failures": 2, "tokens": 3 * (10 - 4 + 2),
        "seconds": None, "answer_seconds": 3 * 0.75, "kv_bytes_before": 300, "kv_bytes_after": 120}


def test_run_batch_with_nothing_left_starts_no_worker(tmp_path):
    import io

    from snapkv_cli.batch.driver import run_batch
    from snapkv_cli.batch.output import StreamOutput

    out, presenter, executor = StreamOutput(io.StringIO()), Events(), Scripted()
    out.answered = {("a", "Q0"), ("a", "Q1")}
    summary = run_batch([Job("a", "a.txt", ("Q0", "Q1"))], executor, out, presenter)
    assert executor.given is None and out.stream.getvalue() == ""
    assert presenter.events == [("started", 0, 0, 1, 2, 1), ("finished", True, 0), ("closed",)]
    assert summary.finished is not None and summary.seconds == summary.finished - summary.started
    assert run_batch([Job("a", "a.txt", ("Q0",))], Scripted(), StreamOutput(io.StringIO())).answered == 1


def test_a_second_line_for_a_question_stops_the_batch_and_it_still_ends(tmp_path):
    import io

    from snapkv_cli.batch.driver import run_batch
    from snapkv_cli.batch.output import StreamOutput

    out, presenter = StreamOutput(io.StringIO()), Events()
    with pytest.raises(RuntimeError, match=re.escape("a second line for ('a', 'Q0')")):
        run_batch([Job("a", "a.txt", ("Q0",))], Scripted(twice=True), out, presenter)
    assert len(jsonl(out.stream.getvalue())) == 1  # the duplicate was never written
    assert presenter.events[-2:] == [("finished", True, 1), ("closed",)]


def test_a_document_is_read_with_the_job_s_pages_else_the_run_s(corpus):
    import io

    from snapkv_cli.answering.documents import DocumentReader
    from snapkv_cli.answering.runner import RunOptions
    from snapkv_cli.batch.driver import Recorder, Task, read_document
    from snapkv_cli.batch.output import StreamOutput
    from snapkv_cli.batch.summary import BatchSummary

    own, default, missing = (Task(Job(name, path, ("Q0", "Q1"), pages=pages), ((0, "Q0"), (1, "Q1")))
                             for name, path, pages in (("own", corpus["report.pdf"], "3"),
                                                       ("default", corpus["report.pdf"], None),
                                                       ("missing", corpus["report.pdf"] + ".missing", None)))
    out, presenter = StreamOutput(io.StringIO()), Events()
    recorder = Recorder(out, BatchSummary(), presenter, [own, default, missing])
    options = RunOptions(reader=DocumentReader(pages="1-2"))
    assert [page.number for page in read_document(own, options, recorder).pages] == [3]
    assert [page.number for page in read_document(default, options, recorder).pages] == [1, 2]
    assert read_document(missing, options, recorder, describe=lambda error: f"described: {type(error).__name__}") \
        is None
    assert jsonl(out.stream.getvalue()) == [
        {"id": "missing", "document": missing.job.document, "question": question, "question_index": index,
         "error": "described: UserError"} for index, question in enumerate(("Q0", "Q1"))]
    assert [event for event in presenter.events if event[0] == "progress"] == [
        ("progress", f"Reading {task.job.document}...") for task in (own, default, missing)]
    too_big = read_document(default, RunOptions(reader=DocumentReader(max_document_mb=0.0001)), recorder)
    assert too_big is None and "limit for documents" in jsonl(out.stream.getvalue())[-1]["error"]



WRITER = """
import sys
from snapkv_cli.batch.output import AnswerFile
out = AnswerFile(sys.argv[1], sync=False)
out.write({"id": "small", "answer": "x", "question": "Q"})
print("ready", flush=True)
out.write({"id": "big", "question": "Q", "answer": "x" * 128_000_000})  # about half a second to write here
"""


def test_output_after_kill_9_in_the_middle_of_a_write(tmp_path):
    """Kill a writer once it has started to append a 128 MB line (which takes it about half a second here):
    reopening keeps every whole line, drops the unfinished one, and the next line starts cleanly."""
    cut_short = 0
    for attempt in range(2):
        path = tmp_path / f"out{attempt}.jsonl"
        path.write_bytes(encode(answer("earlier", "Q")))
        process = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, cwd=ROOT)
        assert process.stdout.readline() == b"ready\n"
        started = path.stat().st_size + 1000
        while path.stat().st_size < started and process.poll() is None:  # until the big line is being written
            time.sleep(0.001)
        process.send_signal(signal.SIGKILL)
        process.wait()
        data = path.read_bytes()
        cut_short += not data.endswith(b"\n")
        whole = data[:data.rfind(b"\n") + 1]
        assert whole.startswith(encode(answer("earlier", "Q")) + encode(answer("small", "Q")))
        out = AnswerFile(str(path))
        assert path.read_bytes() == whole  # only the unfinished tail went
        assert out.answered == {("earlier", "Q"), ("small", "Q")} | ({("big", "Q")} if len(whole) > 1000 else set())
        out.write(answer("after", "Q"))
        out.close()
        assert jsonl(path.read_text())[-1] == answer("after", "Q")
        path.unlink()
    assert cut_short >= 1  # the kill did land inside the write


# --------------------------------------------------------------------------- snapkv batch


def test_answer_lines_equal_ask_json(corpus, tiny_model_path, tmp_path):
    """Each answer line is ask's --json object for the same document, questions and options, with the job's id
    first; a broken PDF gets error lines and the batch goes on; the exit code says something failed."""
    base = ["--model", tiny_model_path, *SMALL]
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("\n".join(json.dumps(job) for job in [
        {"id": "notes", "document": corpus["notes.txt"], "questions": QUESTIONS},
        {"id": "broken", "document": corpus["broken.pdf"]},
        {"id": 3, "document": corpus["report.pdf"], "question": QUESTIONS[1], "pages": "2-3"},
        {"id": "log", "document": corpus["log.md"], "question": QUESTIONS[0], "truncate": "middle"},
    ]) + "\n")
    result = invoke("batch", "--jobs", jobs, "-Q", "When does the office open?", *base, "--quiet")
    assert result.exit_code == 1, (result.stderr, result.exception)
    assert result.stderr == ""
    lines = jsonl(result.stdout)
    piped = invoke("batch", "-", "-Q", "When does the office open?", *base, "--quiet", input=jobs.read_text())
    assert piped.exit_code == 1 and [comparable(line) for line in jsonl(piped.stdout)] == [
        comparable(line) for line in lines]  # a lone - reads the jobs from stdin
    assert [(line["id"], line["question"]) for line in lines] == [
        ("notes", QUESTIONS[0]), ("notes", QUESTIONS[1]), ("broken", "When does the office open?"),
        (3, QUESTIONS[1]), ("log", QUESTIONS[0])]
    expected = (ask_lines(corpus["notes.txt"], "-Q", QUESTIONS[0], "-Q", QUESTIONS[1], *base)
                + ask_lines(corpus["report.pdf"], QUESTIONS[1], "--pages", "2-3", *base)
                + ask_lines(corpus["log.md"], QUESTIONS[0], "--truncate", "middle", *base))
    answered = [line for line in lines if "error" not in line]
    for line, alone in zip(answered, expected, strict=True):
        assert list(line) == ["id", *alone]  # ask's keys, in ask's order
        assert comparable(line, "id") == comparable(alone)
    broken = lines[2]
    assert broken == {"id": "broken", "document": corpus["broken.pdf"], "question": "When does the office open?",
                      "question_index": 0, "error": broken["error"]}
    assert "could not read PDF" in broken["error"]
    # the model's load time is counted once, in the first answer
    assert answered[0]["timings"]["load_s"] > 0 and all(line["timings"]["load_s"] == 0 for line in answered[1:])


def test_documents_as_paths_and_the_summary(corpus, tiny_model_path, tmp_path):
    folder = Path(corpus["notes.txt"]).parent
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTIONS[1] + "\n")
    result = invoke("batch", folder / "notes.txt", folder / "*.md", "-Q", QUESTIONS[0], "--questions", questions,
                    "--model", tiny_model_path, *SMALL)
    assert result.exit_code == 0, (result.stderr, result.exception)
    lines = jsonl(result.stdout)
    assert [(line["id"], line["question_index"]) for line in lines] == [
        (corpus["notes.txt"], 0), (corpus["notes.txt"], 1), (corpus["log.md"], 0), (corpus["log.md"], 1)]
    stderr = " ".join(result.stderr.split())
    assert "4/4 questions" in stderr and "2/2 documents" in stderr and "tok/s" in stderr
    assert "documents │ 2 of 2 done" in stderr and "questions │ 4 answered, 0 failed" in stderr
    assert "saved" in stderr and "output │ stdout" in stderr


def test_rerun_skips_what_the_output_answers(corpus, tiny_model_path, tmp_path):
    out = tmp_path / "answers.jsonl"
    args = ["batch", corpus["notes.txt"], corpus["broken.pdf"], corpus["log.md"], "-Q", QUESTIONS[0],
            "-Q", QUESTIONS[1], "--model", tiny_model_path, *SMALL, "--output", out]
    first = invoke(*args, "--quiet")
    assert first.exit_code == 1 and first.stdout == ""
    lines = jsonl(out.read_text())
    assert len(lines) == 6 and sum("error" in line for line in lines) == 2

    # drop the last answer: the rerun answers exactly that question again, and tries the broken PDF again
    kept = out.read_text().splitlines(keepends=True)[:-1]
    out.write_text("".join(kept))
    second = invoke(*args)
    assert second.exit_code == 1, second.stderr
    again = jsonl(out.read_text())
    assert again[:5] == lines[:5]
    assert [(line["id"], line["question"], "error" in line) for line in again[5:]] == [
        (corpus["broken.pdf"], QUESTIONS[0], True), (corpus["broken.pdf"], QUESTIONS[1], True),
        (corpus["log.md"], QUESTIONS[1], False)]
    # the same answer, question_index included; its prefix was prefilled for it alone this time, and it says so
    assert comparable(again[-1], "prefix", "reused_prefix_tokens") == comparable(lines[-1], "prefix",
                                                                                  "reused_prefix_tokens")
    assert again[-1]["question_index"] == 1 and again[-1]["prefix"]["source"] == "prefill"
    assert "3 question(s) of 3 document(s) already answered" in " ".join(second.stderr.split())

    # nothing left but the broken PDF: every answer is there exactly once
    out.write_text("".join(line for line in out.read_text().splitlines(keepends=True) if '"error"' not in line))
    third = invoke(*args[:2], *args[3:], "--quiet")  # without the broken PDF
    assert third.exit_code == 0 and third.stdout == ""
    final = jsonl(out.read_text())
    assert len(final) == 4 and len({(line["id"], line["question"]) for line in final}) == 4


def test_a_rerun_skips_by_job_id_not_by_document(corpus, tiny_model_path, tmp_path):
    """Two jobs on one document are two jobs: each gets its answers once, and a rerun skips each by its id."""
    out, jobs = tmp_path / "answers.jsonl", tmp_path / "jobs.jsonl"
    jobs.write_text("\n".join(json.dumps({"id": job_id, "document": corpus["notes.txt"], "questions": QUESTIONS})
                              for job_id in ("first", "second")) + "\n")
    args = ["batch", "--jobs", jobs, "--model", tiny_model_path, *SMALL, "--output", out, "--quiet"]
    assert invoke(*args).exit_code == 0
    lines = jsonl(out.read_text())
    assert sorted((line["id"], line["question"]) for line in lines) == sorted(
        (job_id, question) for job_id in ("first", "second") for question in QUESTIONS)
    again = invoke(*args)
    assert again.exit_code == 0, (again.stderr, again.exception)
    assert jsonl(out.read_text()) == lines  # nothing asked again, nothing appended
    out.write_text("".join(out.read_text().splitlines(keepends=True)[:-1]))  # the second job's last answer lost
    assert invoke(*args).exit_code == 0
    final = jsonl(out.read_text())
    assert final[:-1] == lines[:-1] and (final[-1]["id"], final[-1]["question"]) == ("second", QUESTIONS[1])


def test_the_summary_counts_the_tokens_computed_not_those_reused(corpus, tiny_model_path, monkeypatch):
    """The summary's tokens (and so its tokens per second) are the tokens the model prefilled, as its forwards
    record them, plus the tokens generated: the shared prefix of a document counts once, not once per question."""
    forwards, _ = record_loaded_forwards(monkeypatch)
    result = invoke("batch", corpus["notes.txt"], corpus["log.md"], "-Q", QUESTIONS[0], "-Q", QUESTIONS[1],
                    "--model", tiny_model_path, *SMALL)
    assert result.exit_code == 0, (result.stderr, result.exception)
    generated = sum(line["generated_tokens"] for line in jsonl(result.stdout))
    prefilled = sum(tokens for tokens in forwards.sizes() if tokens > 1)  # decode steps feed one token each
    assert len([tokens for tokens in forwards.sizes() if tokens > 1]) == 6  # 2 prefixes and 4 questions
    shown = re.search(r"tokens │ (\d+) prefilled or generated", " ".join(result.stderr.split()))
    assert shown and int(shown.group(1)) == prefilled + generated, (shown, prefilled, generated)


def test_kill_9_mid_run_then_rerun_gives_every_answer_once(corpus, tiny_model_path, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for number in range(8):
        (folder / f"doc{number}.txt").write_text(NOTES.replace("117", str(100 + number)))
    out = tmp_path / "answers.jsonl"
    command = [sys.executable, "-m", "snapkv_cli", "batch", str(folder), "-Q", QUESTIONS[0], "-Q", QUESTIONS[1],
               "--model", tiny_model_path, *SMALL, "--output", str(out), "--quiet"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while (not out.exists() or out.read_bytes().count(b"\n") < 3) and process.poll() is None:
        assert time.monotonic() < deadline, "no answers in 120 s"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = out.read_bytes()
    assert 3 <= before.count(b"\n") < 16, "the kill came after the batch had finished"
    rerun = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert rerun.returncode == 0, rerun.stderr
    after = out.read_bytes()
    assert after.startswith(before[:before.rfind(b"\n") + 1])  # every whole line kept as it was
    lines = jsonl(after.decode())
    keys = [(line["id"], line["question"]) for line in lines]
    assert len(keys) == 16 and len(set(keys)) == 16  # every answer, exactly once


def test_batch_usage_errors(corpus, tiny_model_path, tmp_path):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"document": corpus["notes.txt"], "question": "Who?"}) + "\n")
    for args in ([corpus["notes.txt"], "--jobs", jobs], [], [corpus["notes.txt"]],
                 [corpus["notes.txt"], "-Q", "Who?", "--workers", "2"]):
        result = invoke("batch", *args, "--model", tiny_model_path)
        assert result.exit_code == 2, (args, result.stderr)
    assert_user_error(invoke("batch", "--jobs", tmp_path / "missing.jsonl"), "jobs file not found")
    jobs.write_text('{"document": "a.txt", "question": "Who?", "page": "2"}\n')
    assert_user_error(invoke("batch", "--jobs", jobs), f"{jobs} line 1: unknown key 'page'")


def test_a_page_selection_is_checked_before_the_model_loads(corpus, tmp_path):
    # the model named does not exist: the error is the pages', found first
    result = invoke("batch", corpus["notes.txt"], "-Q", "Who?", "--pages", "2-x", "--model", tmp_path / "nothing")
    assert_user_error(result, "invalid page selection '2-x'")


def test_a_job_s_own_truncate_and_pages(corpus, short_context_model_path, tmp_path):
    """A document longer than the context: the job that says "truncate" is answered as ask --truncate answers it,
    the one that does not gets ask's error and its hint; a job's pages override the run's."""
    long = tmp_path / "long.txt"
    long.write_text(NOTES * 6)
    base = ["--model", short_context_model_path, *SMALL]
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("\n".join(json.dumps(job) for job in [
        {"id": "cut", "document": str(long), "question": QUESTIONS[0], "truncate": "start"},
        {"id": "whole", "document": str(long), "question": QUESTIONS[0]},
        {"id": "page", "document": corpus["report.pdf"], "question": QUESTIONS[0], "pages": "3"},
    ]) + "\n")
    result = invoke("batch", "--jobs", jobs, "--pages", "1", *base, "--quiet")
    assert result.exit_code == 1 and result.stderr == ""
    cut, whole, page = jsonl(result.stdout)
    assert cut["prompt"]["truncated_document_tokens"] > 0
    assert comparable(cut, "id") == comparable(ask_lines(long, QUESTIONS[0], "--truncate", "start", *base)[0])
    alone = invoke("ask", long, QUESTIONS[0], *base)
    assert alone.exit_code == 1
    assert " ".join(whole["error"].split()) == " ".join(alone.stderr.removeprefix("Error: ").split())  # ask's line
    assert "--truncate" in whole["error"]
    assert [row["page"] for row in page["pages"]] == [3]


def test_batch_keeps_to_max_document_mb(corpus, tiny_model_path, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text(NOTES * 10)  # about 4 KB
    result = invoke("batch", big, corpus["notes.txt"], "-Q", QUESTIONS[0], "--model", tiny_model_path, *SMALL,
                    "--max-document-mb", "0.002", "--quiet")
    assert result.exit_code == 1, (result.stderr, result.exception)
    refused, answered = jsonl(result.stdout)
    assert refused["id"] == str(big) and "over the 2.0 KB limit for documents" in refused["error"]
    assert "--max-document-mb" in refused["error"]
    assert answered["id"] == corpus["notes.txt"] and "answer" in answered


def test_ray_flag_without_ray_names_the_install_command(corpus, tiny_model_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails, as when the extra is not installed
    result = invoke("batch", corpus["notes.txt"], "-Q", "Who?", "--model", tiny_model_path, "--ray")
    assert_user_error(result, "running on Ray needs Ray, but it is not installed: pip install 'snapkv-cli[ray]'")


@pytest.mark.parametrize("nodes, device, workers, expected", [
    # one actor per GPU, each seeing only its own device
    ([(16, 4), (16, 4)], "auto", None, (8, {"num_gpus": 1, "num_cpus": 1}, "auto")),
    ([(16, 2)], "cuda:1", 2, (2, {"num_gpus": 1, "num_cpus": 1}, "cuda")),
    # CPU actors: one per node by default, each with as many CPUs as lets the nodes hold them all
    ([(2, 0)], "auto", None, (1, {"num_cpus": 2}, "auto")),
    ([(2, 0)], "auto", 2, (2, {"num_cpus": 1}, "auto")),
    ([(8, 0), (4, 0)], "auto", None, (2, {"num_cpus": 4}, "auto")),
    ([(8, 0), (4, 0)], "auto", 3, (3, {"num_cpus": 4}, "auto")),
    ([(8, 0), (4, 0)], "auto", 1, (1, {"num_cpus": 8}, "auto")),
    ([(16, 4)], "cpu", 3, (3, {"num_cpus": 5}, "cpu")),  # --device cpu on a GPU cluster: CPU actors
    ([(8, 1)], "auto", None, (1, {"num_gpus": 1, "num_cpus": 1}, "auto")),
    ([(16, 2)], "cuda", 1, (1, {"num_gpus": 1, "num_cpus": 1}, "cuda")),
    # a node that is gone holds no actor
    ([(8, 0), (4, 0, False)], "auto", None, (1, {"num_cpus": 8}, "auto")),
    ([(2, 0), (8, 0, False)], "auto", 3, (3, {"num_cpus": 1}, "auto")),
    ([(4, 0, False)], "auto", None, (1, {"num_cpus": 1}, "auto")),
    # a head node that lends no CPU (ray start --num-cpus=0)
    ([(0, 2)], "auto", None, (2, {"num_gpus": 1, "num_cpus": 1}, "auto")),
    ([(0, 0), (6, 0)], "auto", 2, (2, {"num_cpus": 3}, "auto")),
])
def test_ray_actor_resources(monkeypatch, nodes, device, workers, expected):
    from snapkv_cli.answering.runner import RunOptions
    from snapkv_cli.batch.ray_executor import RayExecutor

    monkeypatch.setitem(sys.modules, "ray", FakeRay(*nodes))
    executor = RayExecutor(RunOptions(device=device), workers=workers)
    resources, options = executor._actor_options(FakeRay(*nodes))
    assert (executor.workers, resources, options.device) == expected


@pytest.mark.parametrize("nodes, workers, fragment", [([(16, 2)], 3, "at most 2: one worker per GPU of the cluster"),
                                                      ([(2, 0)], 3, "at most 2: the cluster's CPUs"),
                                                      ([(1, 0)], 2, "at most 1: the cluster's CPUs"),
                                                      ([(0, 0)], 2, "at most 0: the cluster's CPUs")])
def test_ray_refuses_more_workers_than_devices(monkeypatch, nodes, workers, fragment):
    from snapkv_cli.answering.runner import RunOptions
    from snapkv_cli.batch.ray_executor import RayExecutor
    from snapkv_cli.cli.errors import message
    from snapkv_cli.errors import InvalidValue

    monkeypatch.setitem(sys.modules, "ray", FakeRay(*nodes))
    with pytest.raises(InvalidValue) as caught:
        RayExecutor(RunOptions(), workers=workers)._actor_options(FakeRay(*nodes))
    assert message(caught.value) == f"--workers must be {fragment}, got {workers}"


# --------------------------------------------------------------------------- the worker and the local executor


def small_options(model: str, **more):
    from snapkv_cli.answering.runner import RunOptions
    from snapkv_cli.engine import CompressionSettings
    from snapkv_cli.generation import GenerationOptions

    return RunOptions(model=model, device="cpu", generation=GenerationOptions(max_new_tokens=4),
                      settings=CompressionSettings(window_size=16, max_capacity_prompt=48), **more)


def test_a_worker_turns_each_failure_into_the_line_of_its_question(short_context_model_path, tmp_path):
    """A document that cannot become a prompt fails each of its questions, a question too long fails alone, the
    next document starts afresh; an answer's index is its place in the job, and the model's load time goes to the
    worker's first answer, however many questions failed before it."""
    from snapkv_cli.answering.documents import load_document
    from snapkv_cli.batch.worker import BatchWorker

    long, short = tmp_path / "long.txt", tmp_path / "short.txt"
    long.write_text(NOTES * 6)  # longer than the model's context
    short.write_text(NOTES)
    worker = BatchWorker(small_options(short_context_model_path),
                         describe=lambda error: f"described {type(error).__name__}")
    with pytest.raises(RuntimeError) as caught:
        worker.answer(0, "Who?")
    assert str(caught.value) == "open a document before asking its questions"
    assert worker.load() is None
    job = Job("long", str(long), ("Who?", "What?"))
    worker.open(job, load_document(str(long)), 2)
    assert [worker.answer(index, question) for index, question in enumerate(job.questions)] == [
        {"id": "long", "document": str(long), "question": question, "question_index": index,
         "error": "described PromptTooLong"} for index, question in enumerate(job.questions)]
    overlong = "Why " * 200
    job = Job(9, str(short), ("Who?", overlong, "What?"))
    worker.open(job, load_document(str(short)), 2)
    failed = worker.answer(1, overlong)
    assert (failed["id"], failed["question_index"], failed["error"]) == (9, 1, "described PromptTooLong")
    first, second = worker.answer(2, "What?"), worker.answer(0, "Who?")
    assert (first["id"], first["question"], first["question_index"]) == (9, "What?", 2)
    assert (second["id"], second["question"], second["question_index"]) == (9, "Who?", 0)
    assert first["timings"]["load_s"] > 0 and second["timings"]["load_s"] == 0


def test_a_worker_uses_the_job_s_own_template_and_truncation(short_context_model_path, tmp_path):
    from snapkv_cli.answering.documents import load_document
    from snapkv_cli.answering.prompting import load_template
    from snapkv_cli.batch.worker import BatchWorker

    long = tmp_path / "long.txt"
    long.write_text(NOTES * 6)
    document = load_document(str(long))
    lines = []
    for options in (small_options(short_context_model_path), small_options(short_context_model_path,
                                                                            truncate="end")):
        worker = BatchWorker(options)
        for job in (Job("own", str(long), ("Who?",), truncate="start", template=load_template("summary")),
                    Job("run's", str(long), ("Who?",))):
            worker.open(job, document, 1)
            lines.append(worker.answer(0, "Who?"))
    own, runs, own_again, cut_by_the_run = lines
    assert own["prompt"]["template_name"] == "summary" and own["prompt"]["truncated_document_tokens"] > 0
    assert runs["error"].startswith("the prompt has")  # the run does not truncate: a document too long fails
    assert comparable(own_again, "memory") == comparable(own)
    assert cut_by_the_run["prompt"]["template_name"] == "qa" and cut_by_the_run["prompt"][
        "truncated_document_tokens"] > 0


def test_a_worker_that_cannot_load_its_model_says_why(tmp_path):
    """load() gives the reason; a document opened all the same gets the reason as the error of each question."""
    from snapkv_cli.answering.documents import load_document
    from snapkv_cli.batch.worker import BatchWorker

    missing = tmp_path / "no-model"
    problem = BatchWorker(small_options(str(missing))).load()
    assert isinstance(problem, str) and str(missing) in problem
    worker = BatchWorker(small_options(str(missing)), describe=lambda error: f"described: {error}")
    (tmp_path / "a.txt").write_text(NOTES)
    job = Job("a", str(tmp_path / "a.txt"), ("Who?", "What?"))
    worker.open(job, load_document(job.document), 2)
    assert [worker.answer(index, question) for index, question in ((1, "What?"), (0, "Who?"))] == [
        {"id": "a", "document": job.document, "question": question, "question_index": index,
         "error": f"described: {problem}"} for index, question in ((1, "What?"), (0, "Who?"))]


def test_the_local_executor_says_where_it_is_and_stops_when_the_model_cannot_load(corpus, tiny_model_path,
                                                                                    tmp_path):
    """Progress names the document read and the question asked (its place among the job's questions, skipped
    ones included); a document that cannot be read fails its questions and the batch goes on; a model that cannot
    load stops the batch before any line."""
    from snapkv_cli.batch.driver import run_batch
    from snapkv_cli.batch.local import LocalExecutor
    from snapkv_cli.batch.output import StreamOutput

    out = StreamOutput(io.StringIO())
    out.answered = {("b", "Who?")}
    jobs = [Job("a", corpus["notes.txt"], ("Who?", "What?")), Job("gone", "gone.txt", ("Who?",)),
            Job("b", corpus["log.md"], ("Who?", "What?")), Job("c", corpus["notes.txt"], ("Why " * 20_000,))]
    presenter = Events()
    executor = LocalExecutor(small_options(tiny_model_path), describe=lambda error: f"described {type(error).__name__}")
    summary = run_batch(jobs, executor, out, presenter)
    said = [event[1] for event in presenter.events if event[0] == "progress" and event[1].endswith("...")
            and (event[1].startswith("Reading ") or ": question " in event[1])]
    notes, log = corpus["notes.txt"], corpus["log.md"]
    assert said == [f"Reading {notes}...", f"{notes}: question 1 of 2...", f"{notes}: question 2 of 2...",
                    "Reading gone.txt...", f"Reading {log}...", f"{log}: question 2 of 2...", f"Reading {notes}...",
                    f"{notes}: question 1 of 1..."]
    lines = jsonl(out.stream.getvalue())
    assert [(line["id"], line["question_index"], line.get("error")) for line in lines] == [
        ("a", 0, None), ("a", 1, None), ("gone", 0, "described UserError"), ("b", 1, None),
        ("c", 0, "described PromptTooLong")]  # the question is longer than the model's context
    assert (summary.answered, summary.failed, summary.documents_done) == (3, 2, 4)
    assert [event[1:] for event in presenter.events if event[0] == "question"] == [
        ("Who?", 0), ("What?", 1), ("What?", 1), ("Why Why Wh", 0)]  # each asked as the job's question, by place
    assert ("progress", "Loading model...") in presenter.events  # the runner's own progress reaches the batch's
    # a document with two questions left keeps its prefix for both; one with one left is prefilled in one pass,
    # as ask does (the rest of b was answered before)
    prefills = [event[1] for event in presenter.events if event[0] == "phase" and not event[1].startswith("Answering")]
    assert [name.split(":")[0] for name in prefills] == ["Reading the document", "Prefill", "Prefill", "Prefill"]
    assert "after the" in prefills[1] and "after the" in prefills[2] and "after the" not in prefills[3]

    out = StreamOutput(io.StringIO())
    with pytest.raises(UserError, match="no-model"):
        run_batch(jobs, LocalExecutor(small_options(str(tmp_path / "no-model"))), out)
    assert out.stream.getvalue() == ""


def test_a_local_batch_loads_its_model_once(corpus, tiny_model_path):
    """One model for every document of the batch, loaded by the loader given (the one of the package by default)."""
    from snapkv_cli.batch.driver import run_batch
    from snapkv_cli.batch.local import LocalExecutor
    from snapkv_cli.batch.output import StreamOutput
    from snapkv_cli.models.loader import load_model

    loads = []

    def loader(*args, **kwargs):
        loads.append(args[0])
        return load_model(*args, **kwargs)

    jobs = [Job(name, corpus[name], ("Who?", "What?")) for name in ("notes.txt", "log.md")]
    summary = run_batch(jobs, LocalExecutor(small_options(tiny_model_path), load_model=loader),
                        StreamOutput(io.StringIO()))
    assert loads == [tiny_model_path] and summary.answered == 4


@pytest.mark.parametrize("address, environment, dashboard", [
    (None, None, {"include_dashboard": False}),  # a Ray of its own, started here: no dashboard
    ("10.0.0.5:6379", None, {}), (None, "10.0.0.7:6379", {})])
def test_ray_is_joined_or_started_quietly(monkeypatch, address, environment, dashboard):
    """The executor joins the cluster named (``--ray-address``, else ``RAY_ADDRESS``) or starts one; Ray's own logs
    stay off the terminal; a process that has joined Ray already is not joined again."""
    import logging

    from snapkv_cli.answering.runner import RunOptions
    from snapkv_cli.batch.ray_executor import RayExecutor

    if environment is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", environment)
    fake = FakeRay((2, 0))
    monkeypatch.setitem(sys.modules, "ray", fake)
    executor = RayExecutor(RunOptions(), address=address)
    assert executor._connect(fake) is True
    assert fake.init_calls == [{"address": address, "logging_level": logging.ERROR, "log_to_driver": False,
                                **dashboard}]
    assert executor._connect(fake) is False and len(fake.init_calls) == 1


@pytest.mark.parametrize("error", [ConnectionError("no cluster\n  answers there"),
                                   RuntimeError("no cluster answers there"), ValueError("no  cluster answers there")])
@pytest.mark.parametrize("address, environment, where", [
    ("10.0.0.5:6379", "10.0.0.7:6379", "10.0.0.5:6379"), (None, "10.0.0.7:6379", "10.0.0.7:6379"),
    (None, None, "a local Ray")])
def test_a_ray_that_cannot_be_joined_is_a_user_error(monkeypatch, error, address, environment, where):
    from snapkv_cli.answering.runner import RunOptions
    from snapkv_cli.batch.ray_executor import RayExecutor

    if environment is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", environment)
    fake = FakeRay((2, 0), init_error=error)
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(UserError) as caught:
        RayExecutor(RunOptions(), address=address)._connect(fake)
    assert str(caught.value) == f"cannot start or join the Ray cluster at {where}: no cluster answers there"


def test_ray_executor_workers(monkeypatch):
    """At least one worker; before the cluster is seen, as many as asked for, else one."""
    from snapkv_cli.answering.runner import RunOptions
    from snapkv_cli.batch.ray_executor import RayExecutor
    from snapkv_cli.cli.errors import message
    from snapkv_cli.errors import InvalidValue

    monkeypatch.setitem(sys.modules, "ray", FakeRay((4, 0)))
    with pytest.raises(InvalidValue) as caught:
        RayExecutor(RunOptions(), workers=0)
    assert message(caught.value) == "--workers must be at least 1, got 0"
    assert RayExecutor(RunOptions(), workers=1).workers == 1 and RayExecutor(RunOptions(), workers=3).workers == 3
    assert RayExecutor(RunOptions()).workers == 1
    assert RayExecutor(RunOptions()).slots == []  # no actor before the run


def test_a_ray_that_fails_to_import_says_why(monkeypatch, tmp_path):
    """Ray installed but broken (a module it needs is missing): the reason is the import's, not "not installed"."""
    from snapkv_cli.batch.ray_executor import import_ray
    from snapkv_cli.errors import RayUnavailable

    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("import snapkv_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    with pytest.raises(RayUnavailable) as caught:
        import_ray()
    assert str(caught.value) == ("running on Ray needs Ray, but importing it failed (No module named "
                                 "'snapkv_missing_dependency'): pip install 'snapkv-cli[ray]'")
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(RayUnavailable) as caught:
        import_ray()
    assert str(caught.value) == "running on Ray needs Ray, but it is not installed: pip install 'snapkv-cli[ray]'"


class FailingRay(FakeRay):
    """A Ray whose actors cannot be created (the cluster went away)."""

    def remote(self, cls):
        raise ConnectionError("the cluster went away")


@pytest.mark.parametrize("joined_before", [False, True])
def test_a_ray_started_for_a_batch_is_shut_down_at_its_end(monkeypatch, joined_before):
    """Even when the run fails: a Ray the executor started is shut down; one this process had joined before is
    left running for it."""
    from snapkv_cli.answering.runner import RunOptions
    from snapkv_cli.batch.driver import run_batch
    from snapkv_cli.batch.output import StreamOutput
    from snapkv_cli.batch.ray_executor import RayExecutor

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake = FailingRay((2, 0), initialized=joined_before)
    monkeypatch.setitem(sys.modules, "ray", fake)
    out = StreamOutput(io.StringIO())
    with pytest.raises(ConnectionError, match="the cluster went away"):
        run_batch([Job("a", "a.txt", ("Who?",))], RayExecutor(RunOptions(), workers=1), out)
    assert fake.shutdowns == (0 if joined_before else 1) and len(fake.init_calls) == (0 if joined_before else 1)
    assert out.stream.getvalue() == ""


def _summary_rows(table, width: int = 200) -> list[str]:
    """The summary table as a pipe or file shows it: its lines, right-trimmed."""
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(table)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


def _cells(row: str) -> list[str]:
    """A table row's cells, stripped."""
    return [cell.strip() for cell in row.strip("│").split("│")]


def _summary_styles(table) -> dict[str, str]:
    """Each cell's text (stripped) -> the style a colour terminal prints it in."""
    console = Console(width=200, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    return {segment.text.strip(): str(segment.style) for segment in console.render(table)
            if segment.text.strip() and set(segment.text.strip()) - set("│┌┐└┘─┬┴")}


def test_the_batch_summary_table_as_printed():
    from snapkv_cli.batch.summary import BatchSummary
    from snapkv_cli.cli.presenters import summary_table

    # 5 questions to do, 2 answered and 1 failed: 2 not reached; 2 answers took 2.125 s of the 4 s; 340 tokens
    summary = BatchSummary(documents=3, questions=5, skipped_documents=1, skipped_questions=2, workers=2,
                           documents_done=1, answered=2, failed=1, worker_failures=1, tokens=340,
                           answer_seconds=2.125, kv_bytes_before=9000, kv_bytes_after=2500, started=100.0,
                           finished=104.0)
    rows = _summary_rows(summary_table(summary, "out [x].jsonl"))
    width = len(rows[1])
    assert rows[0] == "snapkv batch" and rows[1].startswith("┌") and rows[-1].startswith("└")  # title on the left
    assert [_cells(row) for row in rows[2:-1]] == [
        ["documents", "1 of 3 done (1 skipped: already answered)"],
        ["questions", "2 answered, 1 failed, 2 not reached (2 skipped)"],
        ["workers", "2, 1 died"],
        ["time", "4.0s in all, 2.00s per answered question; a worker spent 1.06s prefilling and decoding each"],
        ["tokens", "340 prefilled or generated (85 tok/s)"],
        ["KV cache", "8.8 KB → 2.4 KB (6.3 KB saved)"],  # 9000, 2500 and 6500 bytes in KiB
        ["output", "out [x].jsonl"]]
    assert all(len(row) == width for row in rows[1:])  # no header row, every row one line
    styles = _summary_styles(summary_table(summary, "out.jsonl"))
    assert styles["documents"] == styles["time"] == styles["output"] == "bold cyan"
    assert styles["questions"] == "bold red" and styles["2 answered, 1 failed, 2 not reached (2 skipped)"] == "red"
    assert styles["workers"] == "bold yellow" and styles["2, 1 died"] == "yellow"  # a worker died
    assert styles["1 of 3 done (1 skipped: already answered)"] == "None"
    narrow = _summary_rows(summary_table(summary, None), width=28)
    labels = [row.split("│")[1].strip() for row in narrow[2:-1]]
    assert [label for label in labels if label] == ["documents", "questions", "workers", "time", "tokens",
                                                    "KV cache"]  # labels never wrap; no output row without one


@pytest.mark.parametrize("workers, worker_failures, shown", [(1, 0, None), (2, 0, "2, 0 died"),
                                                              (1, 1, "1, 1 died")])
def test_the_batch_summary_names_workers_when_several_or_one_died(workers, worker_failures, shown):
    from snapkv_cli.batch.summary import BatchSummary
    from snapkv_cli.cli.presenters import summary_table

    summary = BatchSummary(documents=1, questions=2, workers=workers, worker_failures=worker_failures,
                           documents_done=1, failed=2, tokens=0, started=10.0, finished=10.5)
    table = summary_table(summary, None)
    rows = [_cells(row) for row in _summary_rows(table)[2:-1]]
    assert rows[0] == ["documents", "1 of 1 done"]
    assert rows[1] == ["questions", "0 answered, 2 failed"]  # every question reached, none skipped
    assert ["workers", shown] in rows if shown else all(row[0] != "workers" for row in rows)
    # nothing answered: no time per answer, no KV cache row
    assert rows[-2:] == [["time", "0.5s in all"], ["tokens", "0 prefilled or generated (0 tok/s)"]]
    if shown:
        assert _summary_styles(table)[shown] == ("yellow" if worker_failures else "None")


def test_the_batch_summary_marks_questions_red_only_when_some_failed():
    from snapkv_cli.batch.summary import BatchSummary
    from snapkv_cli.cli.presenters import summary_table

    summary = BatchSummary(documents=1, questions=1, documents_done=1, answered=1, tokens=10, answer_seconds=0.5,
                           kv_bytes_before=2048, kv_bytes_after=1024, started=0.0, finished=2.0)
    table = summary_table(summary, None)
    assert _summary_styles(table)["questions"] == "bold cyan"
    assert _summary_styles(table)["1 answered, 0 failed"] == "None"
    assert _cells(_summary_rows(table)[-2]) == ["KV cache", "2.0 KB → 1.0 KB (1.0 KB saved)"]
    assert _cells(_summary_rows(table)[-4])[1] == (
        "2.0s in all, 2.00s per answered question; a worker spent 0.50s prefilling and decoding each")


def _progress_console(**options):
    import io

    from rich.console import Console

    return Console(file=io.StringIO(), width=200, **({"force_terminal": False, "color_system": None} | options))


def _bar_text(progress) -> str:
    """What the batch's progress bar shows now, rendered apart."""
    console = _progress_console()
    console.print(progress.bar.get_renderable())
    return console.file.getvalue()


def test_the_batch_progress_says_what_was_skipped_failed_and_died_then_the_summary():
    from snapkv_cli.batch.summary import BatchSummary
    from snapkv_cli.cli.presenters import BatchProgress

    console = _progress_console()
    summary = BatchSummary(documents=2, questions=3, skipped_documents=1, skipped_questions=4, started=100.0)
    progress = BatchProgress(console, output="out.jsonl")
    progress.started(summary)
    assert "0/3 questions · 0/2 documents · - tok/s" in _bar_text(progress)
    assert len(_bar_text(progress).split("ETA")[1].split()) == 1  # the time left, and no status before the first
    progress.progress("[b]page[/b] " + "x" * 60)  # cut at 60 characters, markup shown as written
    shown = "[b]page[/b] " + "x" * 48
    assert shown in _bar_text(progress) and shown + "x" not in _bar_text(progress)
    failure = {"id": "j1", "document": "a.txt", "error": "boom"}
    for line in (failure, failure, failure | {"error": "[b]again[/b]"}):  # the same error of a question is told once
        summary.record(line)
        progress.recorded(line, summary)
    assert "3/3 questions · 0/2 documents · 0 tok/s" in _bar_text(progress)
    progress.worker_failed("worker [b]1[/b] died", summary)
    summary.finished = 104.0
    progress.finished(summary)
    assert progress.bar is None
    lines = console.file.getvalue().splitlines()
    assert lines[:4] == ["4 question(s) of 3 document(s) already answered in out.jsonl: skipped",
                         "Failed: a.txt: boom", "Failed: a.txt: [b]again[/b]", "worker [b]1[/b] died"]
    assert "3/3 questions" in lines[4] and len(lines[4].split("ETA")[1].split()) == 1  # the status cleared at the end
    assert lines[5].strip() == "snapkv batch" and "0 answered, 3 failed (4 skipped)" in "\n".join(lines[6:])


def test_a_quiet_batch_progress_prints_nothing_and_an_empty_batch_no_bar():
    from snapkv_cli.batch.summary import BatchSummary
    from snapkv_cli.cli.presenters import BatchProgress

    console = _progress_console()
    quiet = BatchProgress(console, quiet=True, output="out.jsonl")
    summary = BatchSummary(documents=1, questions=1, skipped_questions=2, started=100.0, finished=101.0)
    quiet.started(summary)
    quiet.progress("reading")
    summary.record({"id": "j", "document": "a.txt", "error": "boom"})
    quiet.recorded({"id": "j", "document": "a.txt", "error": "boom"}, summary)
    quiet.worker_failed("worker [b]1[/b] died", summary)
    quiet.finished(summary)
    assert console.file.getvalue() == ""

    nothing = BatchProgress(console, output="out.jsonl")
    nothing.started(BatchSummary(started=100.0, finished=101.0))
    nothing.progress("reading")
    nothing.finished(BatchSummary(started=100.0, finished=101.0))
    assert nothing.bar is None and console.file.getvalue() == ""

    skipped = BatchProgress(console, output="out.jsonl")
    done = BatchSummary(documents=0, skipped_documents=1, skipped_questions=2, started=100.0, finished=101.0)
    skipped.started(done)
    assert skipped.bar is None
    skipped.worker_failed("worker [b]1[/b] died", done)  # no bar: said on the console itself
    skipped.finished(done)
    lines = console.file.getvalue().splitlines()
    assert lines[:2] == ["2 question(s) of 1 document(s) already answered in out.jsonl: skipped",
                         "worker [b]1[/b] died"]
    assert lines[2].strip() == "snapkv batch"


def test_batch_failures_are_red_and_dead_workers_yellow():
    from snapkv_cli.batch.summary import BatchSummary
    from snapkv_cli.cli.presenters import BatchProgress

    console = _progress_console(force_terminal=True, color_system="standard")
    summary = BatchSummary(documents=1, questions=1, started=100.0)
    progress = BatchProgress(console)
    progress.started(summary)
    summary.record({"id": "j", "document": "a.txt", "error": "boom"})
    progress.recorded({"id": "j", "document": "a.txt", "error": "boom"}, summary)
    progress.worker_failed("worker [b]1[/b] died", summary)
    progress.finished(summary)
    text = console.file.getvalue()
    assert "\x1b[31mFailed: a.txt: boom" in text and "\x1b[33mworker [b]1[/b] died" in text


def test_a_batch_on_a_terminal_shows_its_lines_as_written_and_a_bar_with_a_dim_status():
    """On a colour terminal: the skipped line and a failure line with no markup read and no numbers or quotes
    coloured (a failure is red as a whole); the bar: spinner, 24 cells, counts, rate, ETA, then the status, dim."""
    from snapkv_cli.batch.summary import BatchSummary
    from snapkv_cli.cli.presenters import BatchProgress

    console = _progress_console(force_terminal=True, color_system="standard")
    summary = BatchSummary(documents=2, questions=3, skipped_documents=1, skipped_questions=4, started=100.0)
    progress = BatchProgress(console, output="runs/[b]out[/b] 2.jsonl")
    progress.started(summary)
    progress.progress("reading a.txt")
    bar = _progress_console(force_terminal=True, color_system="standard")
    bar.print(progress.bar.get_renderable())
    assert re.fullmatch(r"\x1b\[32m\S\x1b\[0m \x1b\[90m━{24}\x1b\[0m \x1b\[32m0/3\x1b\[0m questions · 0/2 documents · "
                        r"- tok/s · ETA \x1b\[36m-:--:--\x1b\[0m \x1b\[2mreading a.txt\x1b\[0m\n", bar.file.getvalue())
    line = {"id": "j", "document": "a.txt", "error": "line 12 of 'x' is bad"}
    summary.record(line)
    progress.recorded(line, summary)
    progress.finished(summary)
    text = console.file.getvalue()
    assert text.startswith("4 question(s) of 3 document(s) already answered in runs/[b]out[/b] 2.jsonl: skipped\n")
    assert "\x1b[31mFailed: a.txt: line 12 of 'x' is bad\x1b[0m\n" in text


def test_an_error_line_words_a_user_error_as_the_command_line_and_another_by_its_type():
    """``snapkv batch``'s error lines: a user mistake in the command line's words (naming the flag), any other error
    as its type and its text on one line."""
    from snapkv_cli.cli.batch import describe
    from snapkv_cli.errors import InvalidValue

    assert describe(InvalidValue("truncate", "sideways", "one of middle, start, end")) == (
        "--truncate must be one of middle, start, end, got 'sideways'")
    assert describe(RuntimeError("CUDA error:\n  device-side assert")) == "RuntimeError: CUDA error: device-side assert"
