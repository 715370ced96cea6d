"""The command line's presenters: what ``ask``, ``inspect``, ``chat`` and ``batch`` show while a run goes on.

:class:`ProgressPresenter` shows progress on stderr; :class:`AnswerPresenter` also writes answers to stdout, as plain
text streamed as it is generated or as one JSON object per answer (JSONL), and the report to stderr;
:class:`ChatPresenter` is its ``snapkv chat`` form (one report line per answer, errors that do not end the session).
stdout only ever carries answers (or JSON); everything else goes to the stderr console.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, TextIO

from rich.console import Console

from ..presenters import Presenter
from .progress_view import progress_view

if TYPE_CHECKING:
    from ..pipeline import Answer
    from ..prompting import Prompt


class ProgressPresenter(Presenter):
    """A run's progress on the stderr ``console`` (:mod:`snapkv_cli.cli.progress_view`: a bar on a terminal,
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


class AnswerStream:
    """Writes a streamed answer to ``out`` as the stripped answer: leading whitespace dropped, trailing held back."""

    def __init__(self, out: TextIO):
        self.out, self.started, self.held = out, False, ""

    def __call__(self, text: str) -> None:
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        text = self.held + text
        body = text.rstrip()
        self.held = text[len(body):]
        if body:
            self.out.write(body)
            self.out.flush()


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
        from .report_view import compact_line, render_report

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
