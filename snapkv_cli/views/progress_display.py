"""How a run's progress looks on stderr: a Rich progress bar on a terminal, timestamped lines in a log, or nothing.

:class:`~snapkv_cli.cli.presenters.ProgressPresenter` turns a run's steps (:class:`~snapkv_cli.progress.Progress`'s
``progress``, ``phase`` and ``advance``) into calls on one view: ``start(name, total, unit)`` (``total`` None: a step
of unknown length), ``advance(done)``, ``stop()``, and ``show(text)`` for a line that must be seen whatever the view.
:func:`progress_view` picks the view for a console.

The lines for a log (:class:`LineView`) are written by hand: Rich draws nothing live when its console is not a
terminal, and a log needs a line now and then, not a redrawn bar.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

# Off a terminal: at most one progress line per this many seconds, and none in a run's first seconds (a run that
# ends sooner needs none: its report follows at once).
LINE_INTERVAL_S = 5.0


def clock_text(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class SilentView:
    """``--quiet``: no progress; only what must be seen (:meth:`show`)."""

    def __init__(self, console: Console):
        self.console = console

    def start(self, name: str, total: int | None, unit: str) -> None:
        pass

    def advance(self, done: int = 1) -> None:
        pass

    def stop(self) -> None:
        pass

    def show(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


class _Left(ProgressColumn):
    """``about 0:12 left`` once a step of known length has a rate; nothing before or for a step of unknown length."""

    def render(self, task: Task) -> Text:
        remaining = task.time_remaining
        if task.total is None or remaining is None or task.finished:
            return Text("")
        return Text(f"about {clock_text(remaining)} left", style="progress.remaining")


class BarView(SilentView):
    """On a terminal: the step, a bar, its percentage, units done, time spent and time left; cleared at the end
    (a step of unknown length gets a pulsing bar and its time spent). The bar draws on the view's console, so a line
    shown (:meth:`show`) while it runs appears above it."""

    def __init__(self, console: Console):
        super().__init__(console)
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(bar_width=24),
                            TaskProgressColumn(), TextColumn("{task.fields[count]}", markup=False),
                            TimeElapsedColumn(), _Left(), console=console, transient=True)
        self.task = None
        self.unit = ""
        self.running = False

    def start(self, name: str, total: int | None, unit: str) -> None:
        if self.task is not None:
            self.bar.remove_task(self.task)
        self.unit = unit
        self.task = self.bar.add_task(name, total=total, count=f"0/{total} {unit}" if total else "")
        if not self.running:
            self.bar.start()
            self.running = True
        self.bar.refresh()

    def advance(self, done: int = 1) -> None:
        if self.task is None:
            return
        self.bar.advance(self.task, done)
        task = self.bar.tasks[-1]
        if task.total:
            self.bar.update(self.task, count=f"{int(task.completed)}/{int(task.total)} {self.unit}")

    def stop(self) -> None:
        if self.running:
            self.bar.stop()
            self.running = False
        if self.task is not None:
            self.bar.remove_task(self.task)
            self.task = None


class LineView(SilentView):
    """Off a terminal (a log, a pipe): a timestamped line on the step in progress at most every ``interval`` seconds,
    the first one ``interval`` seconds into the run, so that a log shows the run is alive. A background thread
    writes the line when a step advances too slowly to write it itself (a download, a long layer).

    ``clock`` (monotonic seconds) is for tests; :meth:`tick` is what the thread calls.
    """

    def __init__(self, console: Console, interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(console)
        self.interval = LINE_INTERVAL_S if interval is None else interval
        self.clock = clock
        self.lock = threading.Lock()
        self.last_line = clock()
        self.name: str | None = None
        self.total: int | None = None
        self.unit = ""
        self.done = 0
        self.started = 0.0
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, name: str, total: int | None, unit: str) -> None:
        with self.lock:
            self.name, self.total, self.unit, self.done, self.started = name, total, unit, 0, self.clock()
        self._watch()
        self.tick()

    def advance(self, done: int = 1) -> None:
        with self.lock:
            self.done += done
        self.tick()

    def tick(self) -> None:
        """Write the line on the step in progress if the last one is ``interval`` seconds old."""
        with self.lock:
            now = self.clock()
            if self.name is None or now - self.last_line < self.interval:
                return
            self.last_line = now
            line = f"{datetime.now():%H:%M:%S} {self.line(now - self.started)}"
            self._write(line)

    def line(self, elapsed: float) -> str:
        """The step, how far it is and how long it has taken (and, once it has a rate, about how long it needs)."""
        if not self.total:
            return f"{self.name} ({clock_text(elapsed)})"
        share = min(self.done / self.total, 1.0)
        text = f"{self.name}: {share:.0%} ({self.done}/{self.total} {self.unit}), {clock_text(elapsed)}"
        if 0 < self.done < self.total:
            text += f", about {clock_text(elapsed * (self.total - self.done) / self.done)} left"
        return text

    def stop(self) -> None:
        with self.lock:
            self.name = None
        self.stopping.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()
        self.thread = None

    def show(self, text: str) -> None:
        with self.lock:
            self._write(text)

    def _write(self, text: str) -> None:
        file = self.console.file
        file.write(text + "\n")
        file.flush()

    def _watch(self) -> None:
        """Start the thread that writes the line of a step that does not advance (once per view, until stopped)."""
        if self.thread is not None or self.interval == float("inf"):
            return
        self.stopping = threading.Event()
        stopping = self.stopping

        def run() -> None:
            while not stopping.wait(min(self.interval, 1.0)):
                self.tick()

        self.thread = threading.Thread(target=run, name="snapkv-progress", daemon=True)
        self.thread.start()


def progress_view(console: Console, *, quiet: bool = False) -> SilentView:
    """The view for ``console``: nothing but what must be seen when ``quiet``, a bar on a terminal, lines otherwise."""
    if quiet:
        return SilentView(console)
    return BarView(console) if console.is_terminal else LineView(console)
