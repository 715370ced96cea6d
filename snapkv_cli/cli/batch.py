"""``snapkv batch DOCS... -Q ...`` or ``--jobs FILE``: the same questions of many documents, one JSON line per answer.

The model loads once; each document is read and prefilled once for all its questions, and every answer line is what
``snapkv ask DOC -Q ... --json`` prints, with the job's ``id`` first. With ``--output FILE`` the lines are appended
as answers complete and a rerun skips what the file already answers; ``--ray`` spreads the documents over Ray
actors. Progress and a summary go to stderr; the exit code is 1 if any question failed.
"""

from __future__ import annotations

from typing import Optional

import typer

from ..answering.documents import named_formats
from ..errors import UserError
from . import console
from .app import app
from .errors import fail_cleanly, message
from .inputs import read_questions
from .options import Output, RunChoices, run_options

BATCH_PANEL = "Batch"


def describe(error: BaseException) -> str:
    """An error line's message: a user error as the command line words it (naming the flag), else its type and
    text."""
    from ..batch.lines import describe_error

    return message(error) if isinstance(error, UserError) else describe_error(error)


@app.command()
@fail_cleanly
@run_options
def batch(
    documents: Optional[list[str]] = typer.Argument(
        None, metavar="DOCS...", help=f"Documents: files, folders (searched for {named_formats(', ')}) or globs."),
    questions: Optional[list[str]] = typer.Option(
        None, "--question", "-Q", help="A question to ask of every document; repeat it to ask several."),
    questions_file: Optional[str] = typer.Option(
        None, "--questions", help="A file of questions, one per line (- for stdin)."),
    jobs_file: Optional[str] = typer.Option(
        None, "--jobs", rich_help_panel=BATCH_PANEL,
        help="A JSONL file of jobs (- or a lone DOCS - for stdin), one object per line: id, document, question or "
             "questions, and optionally pages, truncate, template. A job without questions is asked the -Q ones."),
    output_path: Optional[str] = typer.Option(
        None, "--output", "-o", rich_help_panel=BATCH_PANEL,
        help="Append the answers to this JSONL file as they complete; a rerun skips those it already holds."),
    ray: bool = typer.Option(
        False, "--ray", rich_help_panel=BATCH_PANEL,
        help="Spread the documents over Ray actors, one model each (joins RAY_ADDRESS if set, else starts Ray here)."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", rich_help_panel=BATCH_PANEL,
        help="Join the Ray cluster at this address (implies --ray)."),
    workers: Optional[int] = typer.Option(
        None, "--workers", min=1, rich_help_panel=BATCH_PANEL,
        help="Ray actors to start (default: one per GPU of the cluster, else one per node)."),
    *,
    choices: RunChoices,
    output: Output,
) -> None:
    """Ask the same questions of many documents: one JSON line per answer (ask's --json object plus the job's id).

    Input: DOCS... with -Q/--questions, or --jobs FILE. Output: JSON lines (--json is implied) on stdout.

    --output FILE appends them as answers complete; a rerun skips what the file already answers.

    A document or question that fails gets an "error" line and the batch goes on; the exit code is then 1.
    """
    from ..batch.jobs import jobs_from_paths, read_jobs

    if documents == ["-"] and jobs_file is None:  # jobs on stdin (a batch reads no document from stdin)
        documents, jobs_file = None, "-"
    if jobs_file is not None and documents:
        raise typer.BadParameter("give documents or --jobs FILE, not both", param_hint="DOCS...")
    if jobs_file is None and not documents:
        raise typer.BadParameter("give documents (files, folders or globs) or --jobs FILE", param_hint="DOCS...")
    if jobs_file == "-" and questions_file == "-":
        raise UserError("--jobs - and --questions - both read stdin: give one of them as a file")
    if workers is not None and not (ray or ray_address):
        raise typer.BadParameter("--workers needs --ray (or --ray-address)", param_hint="--workers")
    asked = list(questions or []) + (read_questions(questions_file) if questions_file is not None else [])
    if jobs_file is not None:
        jobs = read_jobs(jobs_file, asked)
    elif not asked:
        raise typer.BadParameter("give the questions to ask: -Q QUESTION or --questions FILE", param_hint="-Q")
    else:
        jobs = jobs_from_paths(documents, asked)
    options = choices.build()  # the engine (torch) is imported here, once the jobs are known to be sound

    from ..batch.driver import run_batch
    from ..batch.local import LocalExecutor
    from ..batch.output import AnswerFile, StreamOutput
    from .presenters import BatchProgress

    if ray or ray_address:
        from ..batch.ray_executor import RayExecutor

        executor = RayExecutor(options, workers=workers, address=ray_address, describe=describe)
    else:
        executor = LocalExecutor(options, describe=describe)
    out = AnswerFile(output_path) if output_path is not None else StreamOutput()
    try:
        presenter = BatchProgress(console.stderr, quiet=output.quiet, output=output_path or "stdout")
        summary = run_batch(jobs, executor, out, presenter)
    finally:
        out.close()
    if summary.failed:
        raise typer.Exit(1)
