"""One model, many clients: a single worker thread runs the requests one at a time from a bounded queue.

A route :meth:`Worker.submit`\\ s a :class:`Job` (the work, and the presenter that hears its events) and awaits its
future; past the queue's bound the job is refused with :class:`QueueFull`, which says when to retry. The runner's
presenter is the worker's :class:`Relay`, which passes each event to the job now running and stops that job, by
raising :class:`Cancelled` at its next prefilled layer or generated token, once its client has gone or its time is up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..answering.presenter import Presenter


class Cancelled(Exception):
    """The job stopped before its end: its client went away, or its time ran out (the message says which)."""


class QueueFull(Exception):
    """The queue is at its bound; ``retry_after`` is a guess, in whole seconds, of when a place frees up."""

    def __init__(self, retry_after: int, capacity: int):
        self.retry_after, self.capacity = retry_after, capacity
        super().__init__(f"the server is busy: {capacity} requests are waiting for the model; retry in "
                         f"{retry_after} s")


@dataclass
class Job:
    """One request's work on the model: ``work`` runs on the worker thread, ``listener`` hears its events;
    ``time_limit_s`` counts from when it starts."""

    work: Callable[[], object]
    listener: Presenter
    time_limit_s: float | None = None
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    stop: threading.Event = field(default_factory=threading.Event)
    deadline: float | None = None

    def awaitable(self) -> asyncio.Future:
        """The job's outcome as a future of the running event loop; its error is marked seen, so that a job whose
        client left does not log one (whoever awaits it still gets it)."""
        done = asyncio.wrap_future(self.future)
        done.add_done_callback(lambda future: future.cancelled() or future.exception())
        return done

    def cancel(self) -> None:
        """Stop the job: before it starts, it never runs; while it runs, at its next layer or token."""
        self.stop.set()

    def check(self) -> None:
        """Raise :class:`Cancelled` when the job must stop."""
        if self.stop.is_set():
            raise Cancelled("the client went away")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Cancelled(f"the request ran past its {self.time_limit_s:g} s limit")


class Relay(Presenter):
    """The runner's presenter: each event goes to the running job's listener; layers and tokens check first that the
    job may go on."""

    def __init__(self, idle: Presenter | None = None):
        self.idle = idle or Presenter()  # who hears events outside any job (the model's loading)
        self.job: Job | None = None

    @property
    def target(self) -> Presenter:
        return self.job.listener if self.job is not None else self.idle

    def _check(self) -> None:
        if self.job is not None:
            self.job.check()

    def progress(self, message):
        self.target.progress(message)

    def phase(self, name, total, unit):
        self._check()
        self.target.phase(name, total, unit)

    def advance(self, done=1):
        self._check()
        self.target.advance(done)

    def notice(self, message):
        self.target.notice(message)

    def text(self, chunk):
        self._check()
        self.target.text(chunk)

    def question(self, question, index, total):
        self.target.question(question, index, total)

    def prompt(self, prompt, window_size, index, total):
        self.target.prompt(prompt, window_size, index, total)

    def answered(self, answer, index, total):
        self.target.answered(answer, index, total)

    def failed(self, message, index):
        self.target.failed(message, index)


class Worker:
    """The thread that runs jobs one at a time, at most ``capacity`` waiting; ``relay`` is the runner's presenter."""

    def __init__(self, relay: Relay, *, capacity: int, time_limit_s: float | None = None):
        self.relay, self.capacity, self.time_limit_s = relay, capacity, time_limit_s
        self.queue: queue.Queue[Job | None] = queue.Queue(maxsize=capacity)
        self.running: Job | None = None
        self.served = 0
        self.stopped = 0  # of the served, those stopped before their end (Cancelled)
        self.seconds = 0.0  # spent on the jobs served, for the retry guess
        self.thread = threading.Thread(target=self._loop, name="snapkv-worker", daemon=True)
        self.thread.start()

    def submit(self, work: Callable[[], object], listener: Presenter | None = None) -> Job:
        """Queue ``work``; raises :class:`QueueFull` when ``capacity`` jobs are already waiting."""
        job = Job(work, listener or Presenter(), self.time_limit_s)
        try:
            self.queue.put_nowait(job)
        except queue.Full:
            raise QueueFull(self.retry_after(), self.capacity) from None
        return job

    def retry_after(self) -> int:
        """Seconds until a place in the queue is likely free: the mean job's time (1 s before the first)."""
        mean = self.seconds / self.served if self.served else 1.0
        return max(1, math.ceil(mean))

    def status(self) -> dict:
        return {"waiting": self.queue.qsize(), "capacity": self.capacity, "running": self.running is not None,
                "served": self.served, "stopped": self.stopped}

    def _loop(self) -> None:
        while (job := self.queue.get()) is not None:
            if job.stop.is_set() or not job.future.set_running_or_notify_cancel():
                continue  # its client left while it waited
            started = time.monotonic()
            job.deadline = started + job.time_limit_s if job.time_limit_s else None
            self.running, self.relay.job = job, job
            try:
                job.future.set_result(job.work())
            except BaseException as error:  # the request's coroutine raises it
                self.stopped += isinstance(error, Cancelled)
                job.future.set_exception(error)
            finally:
                self.running, self.relay.job = None, None
                self.served += 1
                self.seconds += time.monotonic() - started

    def stop(self) -> None:
        """Stop the running job at its next layer or token, drop the waiting ones, and end the thread."""
        running = self.running
        if running is not None:
            running.cancel()
        while True:
            try:
                job = self.queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.future.cancel()
        self.queue.put(None)
        self.thread.join()
