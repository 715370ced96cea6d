"""What a batch asks: jobs, each one document and its questions, from paths (files, folders, globs) or a JSONL file.

A :class:`Job` is one document with an ``id`` (unique in the batch), its questions, and the document options it may
set for itself (``pages``, ``truncate``, ``template``); the model and the compression are the run's. A jobs file has
one JSON object per line::

    {"id": "acme-2023", "document": "reports/acme.pdf", "questions": ["Who audits it?", "Revenue?"], "pages": "1-9"}

Every problem in the jobs is found here, before any model loads, and names its line.
"""

from __future__ import annotations

import glob
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..answering.documents import DOCUMENT_SUFFIXES, named_formats, parse_page_ranges
from ..answering.prompting import TRUNCATIONS, Template, load_template
from ..errors import BadJob, UserError

JOB_KEYS = ("id", "document", "question", "questions", "pages", "truncate", "template")
_GLOB_CHARACTERS = set("*?[")


@dataclass(frozen=True)
class Job:
    """One document and its questions.

    id: the job's name in the output (a string or an integer; the document path when not given); document: the
    path as given; questions: distinct, in the order asked; pages/truncate/template: this job's own document
    options (None: the run's).
    """

    id: str | int
    document: str
    questions: tuple[str, ...]
    pages: str | None = None
    truncate: str | None = None
    template: Template | None = None


def _distinct(questions: Sequence[str]) -> tuple[str, ...]:
    """The questions stripped, blank ones refused, repeats dropped (a question is answered once per job)."""
    cleaned = [question.strip() for question in questions]
    if any(not question for question in cleaned):
        raise UserError("a question is empty: every question needs some text")
    return tuple(dict.fromkeys(cleaned))


# -- documents given as paths ------------------------------------------------------------------------------------
def _is_document_file(path: Path) -> bool:
    """A file whose name ends as a document's (hidden ones are left out by the folder search that calls this)."""
    return path.is_file() and path.suffix.lower() in DOCUMENT_SUFFIXES


def expand_documents(paths: Sequence[str]) -> list[str]:
    """The document files named by ``paths``: files as given, folders searched recursively for PDF, text, Markdown
    and HTML files (hidden ones left out), globs (``**`` included) expanded; sorted within each, repeats dropped.

    A path that does not exist is kept (its job then fails with a line of its own); a folder with no documents or a
    glob that matches nothing is an error.
    """
    found: list[str] = []
    for given in paths:
        if given == "-":
            raise UserError("a batch reads its documents from files: give their paths, or a jobs file (- for jobs on "
                            "stdin)")
        path = Path(given)
        if path.is_dir():
            inside = sorted(str(item) for item in path.rglob("*") if _is_document_file(item)
                            and not any(part.startswith(".") for part in item.relative_to(path).parts))
            if not inside:
                raise UserError(f"no documents in the folder {given}: it holds no {named_formats()} files")
            found += inside
        elif not path.exists() and _GLOB_CHARACTERS & set(given):
            matches = sorted(match for match in glob.glob(given, recursive=True) if Path(match).is_file())
            if not matches:
                raise UserError(f"no files match {given}")
            found += matches
        else:
            found.append(given)
    return list(dict.fromkeys(found))


def jobs_from_paths(paths: Sequence[str], questions: Sequence[str]) -> list[Job]:
    """One job per document named by ``paths`` (see :func:`expand_documents`), each asked every question; the id
    of each is its path."""
    if not paths:
        raise UserError("no documents: give files, folders or globs, or a jobs file")
    asked = _distinct(questions)
    if not asked:
        raise UserError("no questions: give the questions to ask of every document")
    return [Job(id=document, document=document, questions=asked) for document in expand_documents(paths)]


# -- a jobs file -------------------------------------------------------------------------------------------------
def _text(value, what: str, source: str, line: int) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and what == "pages":
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise BadJob(source, line, f"{what} must be a non-empty string, got {json.dumps(value)}")
    return value.strip()


def parse_job(data: dict, default_questions: Sequence[str], source: str, line: int) -> Job:
    """The :class:`Job` of one jobs-file object (line ``line`` of ``source``)."""
    unknown = [key for key in data if key not in JOB_KEYS]
    if unknown:
        raise BadJob(source, line, f"unknown key {unknown[0]!r}: a job has {', '.join(JOB_KEYS)}")
    if "document" not in data:
        raise BadJob(source, line, "no document: every job needs a document path")
    document = _text(data["document"], "document", source, line)
    job_id = data.get("id", document)
    if isinstance(job_id, bool) or not isinstance(job_id, (str, int)) or job_id == "":
        raise BadJob(source, line, f"id must be a string or an integer, got {json.dumps(job_id)}")
    if "question" in data and "questions" in data:
        raise BadJob(source, line, "give question or questions, not both")
    if "question" in data:
        asked = [_text(data["question"], "question", source, line)]
    elif "questions" in data:
        asked = data["questions"]
        if not isinstance(asked, list) or not asked:
            raise BadJob(source, line, "questions must be a non-empty list of strings")
        asked = [_text(question, "every question", source, line) for question in asked]
    else:
        asked = list(default_questions)
        if not asked:
            raise BadJob(source, line, "no question: give question or questions, or questions for every job")
    options = {}
    if data.get("pages") is not None:
        pages = _text(data["pages"], "pages", source, line)
        try:
            parse_page_ranges(pages)  # its form now; whether the document has those pages when it is read
        except UserError as error:
            raise BadJob(source, line, str(error)) from None
        options["pages"] = pages
    if data.get("truncate") is not None:
        truncate = data["truncate"]
        if truncate not in TRUNCATIONS:
            raise BadJob(source, line, f"truncate must be one of {', '.join(TRUNCATIONS)}, got {json.dumps(truncate)}")
        options["truncate"] = truncate
    if data.get("template") is not None:
        template = _text(data["template"], "template", source, line)
        try:
            options["template"] = load_template(template)
        except UserError as error:
            raise BadJob(source, line, str(error)) from None
    return Job(id=job_id, document=document, questions=_distinct(asked), **options)


def read_jobs(source: str, default_questions: Sequence[str] = (), *, stdin: TextIO | None = None) -> list[Job]:
    """The jobs of the JSONL file ``source`` (``-``: stdin); blank lines are skipped. A job without questions is
    asked ``default_questions``. Ids must be unique."""
    if source == "-":
        name, text = "<stdin>", (stdin or sys.stdin).read()
    else:
        name = source
        try:
            text = Path(source).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(f"jobs file not found: {source}; give a JSONL file with one job per line") from None
        except IsADirectoryError:
            raise UserError(f"jobs file {source} is a folder; give a JSONL file with one job per line") from None
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"cannot read jobs file {source}: {getattr(error, 'strerror', None) or error}") from None
    default_questions = _distinct(default_questions)
    jobs: list[Job] = []
    first_line: dict = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as error:
            raise BadJob(name, number, f"not JSON ({error.msg}); write one JSON object per line") from None
        if not isinstance(data, dict):
            raise BadJob(name, number, "not a JSON object; write one object per line")
        job = parse_job(data, default_questions, name, number)
        if job.id in first_line:
            raise BadJob(name, number, f"id {json.dumps(job.id)} is already used on line {first_line[job.id]}")
        first_line[job.id] = number
        jobs.append(job)
    if not jobs:
        raise UserError(f"no jobs in {name}: write one JSON object per line")
    return jobs
