"""What to read and what to ask: ``[DOC] [QUESTION]`` arguments, ``--question``s and ``--questions FILE``.

One rule for every command that takes a document and questions (``ask``, ``inspect``): the positional question (if
any) comes first, then the ``--question``s in order, then the file's lines. A lone argument with the document piped
in on stdin is the question.
"""

from __future__ import annotations

import sys
from typing import TextIO

import typer

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


def document_and_questions(inputs: list[str] | None, options: list[str] | None = None,
                           questions_file: str | None = None) -> tuple[str, list[str]]:
    """(document path, questions) from the arguments, the repeated ``--question`` and ``--questions FILE``."""
    inputs = list(inputs or [])
    terminal = _stdin_is_terminal()
    if not options and questions_file is None and len(inputs) == 1:
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
        raise typer.BadParameter("give a question (QUESTION, --question or --questions FILE)", param_hint=ARGUMENTS)
    if any(not question.strip() for question in questions):
        raise UserError("a question is empty: every question needs some text")
    return document_path, questions
