"""``snapkv chat DOC``: question after question about one document, which is read (or loaded) once.

Questions come from stdin one line at a time (the ``> `` prompt goes to stderr, and only on a terminal); each answer
streams to stdout followed by a newline (or one JSON line with ``--json``), and one report line goes to stderr. A
question that fails (too long for the context, say) prints its ``Error:`` line and the chat goes on. End of input
(Ctrl-D) leaves; Ctrl-C while an answer is being written cancels that answer, Ctrl-C at the prompt leaves (exit code
130). The shared prefix is never modified by a question, so a cancelled answer leaves nothing behind.
"""

from __future__ import annotations

import sys
from typing import TextIO

import typer

from ..answering.documents import named_formats
from ..errors import UserError
from . import console
from .app import app
from .errors import fail_cleanly, message
from .options import Output, RunChoices, run_options

PROMPT = "> "


@app.command()
@fail_cleanly
@run_options
def chat(
    doc: str = typer.Argument(..., metavar="DOC", help=f"Document ({named_formats(', ')}); questions come from stdin."),
    *,
    choices: RunChoices,
    output: Output,
) -> None:
    """Ask question after question about one document, read once: one question per line on stdin, Ctrl-D to leave."""
    if doc == "-":
        raise UserError("snapkv chat reads your questions from stdin, so the document cannot come from stdin: "
                        "give the document as a file path")
    document = choices.read(doc)  # bad input fails here, before the engine (torch) is imported
    options = choices.build()
    from ..answering.runner import Runner
    from .presenters import ChatPresenter

    runner = Runner(options, ChatPresenter(console.stderr, quiet=output.quiet, as_json=output.as_json))
    code = run_chat(runner, document)
    if code:
        raise typer.Exit(code)


def run_chat(runner, document, *, stdin: TextIO | None = None) -> int:
    """Run the loop with ``runner`` (whose presenter is a ``ChatPresenter``: answers go to its ``out``) on questions
    from ``stdin`` (default: sys.stdin); return the exit code (0 at end of input, 130 after Ctrl-C at the prompt)."""
    from ..views.report_panel import doc_cache_line

    stdin = stdin or sys.stdin
    presenter = runner.presenter
    interactive = _is_terminal(stdin)
    terminal = presenter.console.file

    def say(text: str) -> None:
        if not presenter.quiet:
            presenter.console.print(text, markup=False, highlight=False, soft_wrap=True)

    try:
        session = runner.open(document)
        # the prefix does not depend on the question (unless a long question forces more truncation)
        prefix, _ = session.prepare(session.build_prompt("?"))
    finally:
        presenter.close()
    how = "loaded from the document cache" if prefix.source == "disk" else "prefilled"
    say(f"{document.source}: {len(prefix.ids)} prompt tokens {how} in {prefix.seconds:.2f}s. "
        f"Ask a question{'' if not interactive else ' (Ctrl-D to leave, Ctrl-C to stop an answer)'}.")
    if prefix.doc_cache.status in ("stored", "rebuilt", "not_stored"):
        say(doc_cache_line(prefix.doc_cache))

    index = 0
    while True:
        if interactive:
            terminal.write(PROMPT)
            terminal.flush()
        try:
            line = stdin.readline()
        except KeyboardInterrupt:
            if interactive:
                terminal.write("\n")
            return 130
        if not line:
            if interactive:
                terminal.write("\n")
            return 0
        question = line.strip()
        if not question:
            continue
        try:
            runner.answer(session, question, index=index)
        except KeyboardInterrupt:
            presenter.failed("(answer cancelled)", index)
        except UserError as error:
            presenter.failed(f"Error: {message(error)}", index)
        finally:
            presenter.close()
        index += 1


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
