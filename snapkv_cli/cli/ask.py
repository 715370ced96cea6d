"""``snapkv ask DOC QUESTION``: answer on stdout (streamed, or JSON), report on stderr; several questions too."""

from __future__ import annotations

from typing import Optional

import typer

from ..answering.documents import named_formats
from . import console
from .app import app
from .errors import fail_cleanly
from .inputs import ARGUMENTS, document_and_questions
from .options import Output, RunChoices, run_options


@app.command()
@fail_cleanly
@run_options
def ask(
    inputs: Optional[list[str]] = typer.Argument(
        None, metavar=ARGUMENTS, help=f"Document ({named_formats(', ')}, or - for stdin) and question."),
    questions: Optional[list[str]] = typer.Option(
        None, "--question", "-Q", help="A question; repeat it to ask several (the document is read once)."),
    questions_file: Optional[str] = typer.Option(
        None, "--questions", help="A file of questions, one per line (- for stdin)."),
    *,
    choices: RunChoices,
    output: Output,
) -> None:
    """Answer a question about a document; the answer streams to stdout, the report goes to stderr.

    Several questions (-Q ... -Q ..., --questions FILE) share one prefill of the document.
    """
    document_path, asked = document_and_questions(inputs, questions, questions_file)
    document = choices.read(document_path)  # bad input fails here, before the engine (torch) is imported
    options = choices.build()
    from ..answering.runner import Runner
    from .presenters import AnswerPresenter

    runner = Runner(options, AnswerPresenter(console.stderr, quiet=output.quiet, as_json=output.as_json))
    runner.ask(document, asked)
