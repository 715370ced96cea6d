"""The lines a batch writes: an answer is ``ask``'s JSON object with the job's ``id`` first; an error names the job,
the question and what went wrong."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UserError

if TYPE_CHECKING:
    from ..answering.report import Report
    from .jobs import Job


def answer_line(job: Job, report: Report) -> dict:
    """``report.to_json()`` (the schema of ``snapkv ask --json``, with ``document`` and ``question``), ``id`` first."""
    return {"id": job.id, **report.to_json()}


def error_line(job: Job, index: int, question: str, message: str) -> dict:
    """The line of a question that got no answer: ``id``, ``document``, ``question``, ``question_index``, ``error``."""
    return {"id": job.id, "document": job.document, "question": question, "question_index": index, "error": message}


def describe_error(error: BaseException) -> str:
    """A one-line message for an error line: a user error's own message, else the exception's type and message."""
    if isinstance(error, UserError):
        return str(error)
    return f"{type(error).__name__}: {' '.join(str(error).split())}"
