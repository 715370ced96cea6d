"""``snapkv batch`` on stderr: a Rich progress bar while it runs (questions and documents done, tokens/s, ETA, what
the worker is doing), each failure as one line above it, and a summary table at the end."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..batch.presenter import BatchPresenter
from ..batch.summary import BatchSummary
from ..views.units import human_bytes


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
