"""What to read and what to ask: ``[DOC] [QUESTION]`` arguments, ``--question``s and ``--questions FILE``.

One rule for every command that takes a document and questions (``ask``, ``inspect``): the positional question (if
any) comes first, then the ``--question``s in order, then the file's lines. A lone argument is the question when the
document is piped in on stdin, unless it names a document (an existing file, or a path such as ``notes.txt`` or
``./report``): then it is the document, and the question is missing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

import typer

from ..answering.documents import DOCUMENT_SUFFIXES
from ..errors import UserError

ARGUMENTS = "DOC QUESTION"


def read_questions(source: str, stdin: TextIO | None = None) -> list[str]:
    """One question per line of the file ``source`` (``-``: stdin); blank lines are skipped."""
    if source == "-":
        text = (stdin or sys.stdin).read()
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        name = "<stdin>"
    else:
        try:
            with open(source, encoding="utf-8", errors="replace") as file:
                text = file.read()
        except FileNotFoundError:
            raise UserError(f"questions file not found: {source}; give a text file with one question per line") \
                from None
        except IsADirectoryError:
            raise UserError(f"questions file {source} is a directory; give a text file with one question per line") \
                from None
        except OSError as error:
            raise UserError(f"cannot read questions file {source}: {error.strerror}") from None
        name = source
    questions = [line.strip() for line in text.splitlines() if line.strip()]
    if not questions:
        raise UserError(f"no questions in {name}: write one question per line")
    return questions


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def names_a_document(argument: str) -> bool:
    """Whether a lone argument is a document rather than a question: it exists, or it is one word written as a path
    (a document's file name ending, or a start such as ``./``, ``/`` or ``~``)."""
    if os.path.lexists(argument):
        return True
    if not argument or any(character.isspace() for character in argument):
        return False
    return Path(argument).suffix.lower() in DOCUMENT_SUFFIXES or argument.startswith(("/", "./", "../", "~"))


def document_and_questions(inputs: list[str] | None, options: list[str] | None = None,
                           questions_file: str | None = None) -> tuple[str, list[str]]:
    """(document path, questions) from the arguments, the repeated ``--question`` and ``--questions FILE``."""
    inputs = list(inputs or [])
    terminal = _stdin_is_terminal()
    if not options and questions_file is None and len(inputs) == 1 and not names_a_document(inputs[0]):
        if terminal:
            raise typer.BadParameter("give a document and a question, or pipe the document in",
                                     param_hint=ARGUMENTS)
        inputs = ["-", inputs[0]]
    if len(inputs) > 2:
        raise typer.BadParameter(f"expected DOC and at most one QUESTION, got {len(inputs)} arguments (quote the "
                                 "question)", param_hint=ARGUMENTS)
    stdin_taken = questions_file == "-"
    if not inputs:
        if terminal and not stdin_taken:
            raise typer.BadParameter("give a document, or pipe the document in", param_hint=ARGUMENTS)
        inputs = ["-"]
    document_path = inputs[0]
    if document_path == "-" and stdin_taken:
        raise UserError("--questions - reads the questions from stdin, so the document cannot come from stdin too: "
                        "give the document as a file path")
    questions = inputs[1:] + list(options or [])
    if questions_file is not None:
        questions += read_questions(questions_file)
    if not questions:
        about = "" if document_path == "-" else f" about {document_path}"
        raise typer.BadParameter(f"give a question{about} (QUESTION, --question or --questions FILE)",
                                 param_hint=ARGUMENTS)
    if any(not question.strip() for question in questions):
        raise UserError("a question is empty: every question needs some text")
    return document_path, questions
