"""The command line's presenters: what ``ask``, ``inspect``, ``chat`` and ``batch`` show while a run goes on.

:class:`ProgressPresenter` shows progress on stderr; :class:`AnswerPresenter` also writes answers to stdout, as plain
text streamed as it is generated or as one JSON object per answer (JSONL), and the report to stderr;
:class:`ChatPresenter` is its ``snapkv chat`` form (one report line per answer, errors that do not end the session);
:class:`InspectPresenter` is ``snapkv inspect``'s (the HTML and PNG files, then the inspection on stdout);
:class:`BatchProgress` is ``snapkv batch``'s (a progress bar of questions and documents done, tokens/s and time left,
each failure as one line above it, and a summary table at the end). stdout only ever carries answers (or JSON);
everything else goes to the stderr console.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..answering.presenter import Presenter
from ..batch.presenter import BatchPresenter
from ..views.answer_stream import AnswerStream
from ..views.progress_display import progress_view
from ..views.units import human_bytes

if TYPE_CHECKING:
    from pathlib import Path

    from ..answering.inspection import Inspection, Occurrence
    from ..answering.prompting import Prompt
    from ..answering.report import Answer
    from ..batch.summary import BatchSummary


class ProgressPresenter(Presenter):
    """A run's progress on the stderr ``console`` (:mod:`snapkv_cli.views.progress_display`: a bar on a terminal,
    timestamped lines otherwise, nothing when ``quiet``); notices (a model's terms) are shown even then."""

    def __init__(self, console: Console, *, quiet: bool = False):
        self.console, self.quiet = console, quiet
        self.view = progress_view(console, quiet=quiet)

    def progress(self, message: str) -> None:
        self.view.start(message, None, "")

    def phase(self, name: str, total: int | None, unit: str) -> None:
        self.view.start(name, total, unit)

    def advance(self, done: int = 1) -> None:
        self.view.advance(done)

    def notice(self, message: str) -> None:
        self.view.show(message)

    def close(self) -> None:
        self.view.stop()


class AnswerPresenter(ProgressPresenter):
    """Answers on stdout (streamed text, or one JSON object per answer with ``as_json``), reports on stderr (and a
    warning when a question does not fit the observation window).

    With several questions the text form puts ``Q: <question>`` before each answer and a blank line after it. The
    stderr report is the full panel for the first answer, then one line per answer.
    """

    full_report = True

    def __init__(self, console: Console, *, quiet: bool = False, as_json: bool = False, out: TextIO | None = None):
        super().__init__(console, quiet=quiet)
        self.as_json = as_json
        self.out = out or sys.stdout
        self.stream: AnswerStream | None = None

    def prompt(self, prompt: Prompt, window_size: int, index: int, total: int | None) -> None:
        report = prompt.window_report(window_size)
        if not report["question_fits"] and not self.quiet:
            which = f"question {index + 1}: " if total != 1 else ""
            self.console.print(f"[yellow]Warning:[/] {which}the question has {report['question_tokens']} tokens "
                               f"but only {report['question_tokens_in_window']} fall in the {window_size}-token "
                               "window; raise --window")

    def question(self, question: str, index: int, total: int | None) -> None:
        self.stream = AnswerStream(self.out)
        if total is not None and total > 1 and not self.as_json:
            self.out.write(f"Q: {' '.join(question.split())}\n")
            self.out.flush()

    def text(self, chunk: str) -> None:
        if self.as_json or self.stream is None:
            return
        if self.console.is_terminal and self.out.isatty():  # on one screen the answer is its own progress bar
            self.view.stop()
        self.stream(chunk)

    def answered(self, answer: Answer, index: int, total: int | None) -> None:
        self.view.stop()
        if self.as_json:
            self.out.write(json.dumps(answer.report.to_json(), ensure_ascii=False) + "\n")
        else:
            self.out.write("\n\n" if total is not None and total > 1 else "\n")
        self.out.flush()
        if self.quiet:
            return
        from ..views.report_panel import compact_line, render_report

        if self.full_report and index == 0:
            render_report(answer.report, self.console)
        if self.full_report and total == 1 and not answer.report.doc_cache.enabled:
            return
        label = f"[{index + 1}/{total}]" if total is not None else f"[{index + 1}]"
        self.console.print(compact_line(answer.report, label), markup=False, highlight=False, soft_wrap=True)


class ChatPresenter(AnswerPresenter):
    """``snapkv chat``: one report line per answer; a question that fails prints its error and the chat goes on."""

    full_report = False

    def failed(self, message: str, index: int) -> None:
        self.view.stop()
        if self.stream is not None and self.stream.started:
            self.out.write("\n")
            self.out.flush()
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)


class InspectPresenter(ProgressPresenter):
    """``snapkv inspect``'s output: the ``html`` page and ``png`` heatmap (of pooled scores with ``png_scores``)
    asked for, a progress line before each; then on stdout the inspection as JSON with ``as_json`` (the ``--find``
    texts' occurrences as ``"found"``), else the answer (``with_answer``) and the terminal view (``layer``,
    ``head``, ``full``); then ``Wrote PATH`` on stderr for each file written (nothing when ``quiet``)."""

    def __init__(self, console: Console, *, quiet: bool = False, as_json: bool = False, out: TextIO | None = None,
                 html: Path | None = None, png: Path | None = None, png_scores: bool = False,
                 layer: int | None = None, head: int | None = None, full: bool = False, with_answer: bool = False):
        super().__init__(console, quiet=quiet)
        self.as_json, self.out = as_json, out or sys.stdout
        self.html, self.png, self.png_scores = html, png, png_scores
        self.layer, self.head, self.full, self.with_answer = layer, head, full, with_answer
        self.written: list[Path] = []

    def write_files(self, inspection: Inspection, found: tuple[list[Occurrence], ...]) -> None:
        """Write the HTML page and the PNG heatmap asked for (the ``found`` occurrences marked on the heatmap)."""
        if self.html is not None:
            from ..views.html import write_html

            self.progress(f"Writing {self.html}...")
            write_html(inspection, self.html, layer=self.layer, head=self.head)
            self.written.append(self.html)
        if self.png is not None:
            from ..views.heatmap import write_heatmap

            self.progress(f"Writing {self.png}...")
            write_heatmap(inspection, self.png, scores=self.png_scores, head=self.head, found=found)
            self.written.append(self.png)

    def inspected(self, inspection: Inspection, found: tuple[list[Occurrence], ...]) -> None:
        """Show ``inspection`` (one list of occurrences in ``found`` per ``--find`` text) once the run is over."""
        if self.as_json:
            data = inspection.to_json()
            if found:
                data["found"] = [occurrence.to_json() for occurrences in found for occurrence in occurrences]
            self.out.write(json.dumps(data, ensure_ascii=False) + "\n")
            self.out.flush()
        else:
            if self.with_answer:
                self.out.write(inspection.answer + "\n")
                self.out.flush()
            from ..views.terminal import render

            render(inspection, Console(file=self.out, highlight=False), layer=self.layer, head=self.head,
                   full=self.full, found=found)
        if not self.quiet:
            for path in self.written:
                self.console.print(f"Wrote {path}", markup=False, highlight=False)


class BatchProgress(BatchPresenter):
    """The progress bar and summary of a batch on ``console`` (nothing when ``quiet``); ``output`` names where the
    lines go, for the summary."""

    def __init__(self, console: Console, *, quiet: bool = False, output: str | None = None):
        self.console, self.quiet, self.output = console, quiet, output
        self.bar: Progress | None = None
        self.task = None
        self.last_error: tuple | None = None

    def started(self, summary: BatchSummary) -> None:
        if self.quiet:
            return
        if summary.skipped_questions:
            documents = summary.skipped_documents + summary.documents
            self.console.print(f"{summary.skipped_questions} question(s) of {documents} document(s) already "
                               f"answered in {self.output}: skipped", markup=False, highlight=False)
        if not summary.questions:
            return
        self.bar = Progress(SpinnerColumn(), BarColumn(bar_width=24), MofNCompleteColumn(),
                            TextColumn("questions · {task.fields[documents]} · {task.fields[rate]} · ETA"),
                            TimeRemainingColumn(), TextColumn("{task.fields[status]}", style="dim"),
                            console=self.console, transient=False)
        self.task = self.bar.add_task("batch", total=summary.questions, documents=self._documents(summary),
                                      rate="- tok/s", status="")
        self.bar.start()

    @staticmethod
    def _documents(summary: BatchSummary) -> str:
        return f"{summary.documents_done}/{summary.documents} documents"

    def progress(self, message: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, status=escape(message[:60]))

    def recorded(self, line: dict, summary: BatchSummary) -> None:
        if self.bar is None:
            return
        if "error" in line and self.last_error != (line["id"], line["error"]):
            self.last_error = (line["id"], line["error"])
            self.bar.console.print(f"Failed: {line['document']}: {line['error']}", style="red", markup=False,
                                   highlight=False)
        self.bar.update(self.task, completed=summary.done, documents=self._documents(summary),
                        rate=f"{summary.tokens_per_second:.0f} tok/s")

    def worker_failed(self, message: str, summary: BatchSummary) -> None:
        if not self.quiet:
            (self.bar.console if self.bar is not None else self.console).print(
                message, style="yellow", markup=False, highlight=False)

    def finished(self, summary: BatchSummary) -> None:
        if self.bar is not None:
            self.bar.update(self.task, status="")
            self.bar.stop()
            self.bar = None
        if self.quiet or not (summary.questions or summary.skipped_questions):
            return
        self.console.print(summary_table(summary, self.output))


def summary_table(summary: BatchSummary, output: str | None) -> Table:
    """Documents, questions, failures, workers, total and per-question time, tokens, KV bytes saved."""
    table = Table(title="snapkv batch", show_header=False, title_justify="left")
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    skipped = f" ({summary.skipped_documents} skipped: already answered)" if summary.skipped_documents else ""
    table.add_row("documents", f"{summary.documents_done} of {summary.documents} done{skipped}")
    questions = f"{summary.answered} answered, {summary.failed} failed"
    if summary.done < summary.questions:
        questions += f", {summary.questions - summary.done} not reached"
    if summary.skipped_questions:
        questions += f" ({summary.skipped_questions} skipped)"
    table.add_row("questions", questions, style="red" if summary.failed else None)
    if summary.worker_failures or summary.workers > 1:
        table.add_row("workers", f"{summary.workers}, {summary.worker_failures} died",
                      style="yellow" if summary.worker_failures else None)
    time = f"{summary.seconds:.1f}s in all"
    if summary.answered:
        time += (f", {summary.seconds_per_question:.2f}s per answered question; a worker spent "
                 f"{summary.answer_seconds / summary.answered:.2f}s prefilling and decoding each")
    table.add_row("time", time)
    table.add_row("tokens", f"{summary.tokens} prefilled or generated ({summary.tokens_per_second:.0f} tok/s)")
    if summary.answered:
        table.add_row("KV cache", f"{human_bytes(summary.kv_bytes_before)} → {human_bytes(summary.kv_bytes_after)} "
                                  f"({human_bytes(summary.kv_bytes_saved)} saved)")
    if output:
        table.add_row("output", escape(output))
    return table
