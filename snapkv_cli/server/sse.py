"""Server-sent events: a run's answer, as it is generated, carried from the worker thread to the client.

:class:`AnswerEvents` is the presenter of one request: the answer's text (stripped at both ends as the finished
answer is, :class:`~snapkv_cli.views.answer_stream.AnswerStream`) and its progress messages go onto an asyncio queue
of the request's event loop. :func:`stream_job` turns them into the response's events while the job runs, with a
comment line every few seconds of silence (a long prefill), and cancels the job when the client goes away.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from ..answering.presenter import Presenter
from ..views.answer_stream import AnswerStream
from .worker import Job

HEARTBEAT_S = 5.0


def event(data, name: str | None = None) -> str:
    """One event: ``data`` (JSON unless already text) with an optional event name."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {name}\n" if name else ""
    return head + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n"


class AnswerEvents(Presenter):
    """Puts ``("text", chunk)`` and ``("progress", message)`` on ``queue`` from the worker thread; ``begun`` is
    done once the first is there."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.queue = loop, asyncio.Queue()
        self.begun = loop.create_future()  # done at the first event
        self.stream = AnswerStream(self)

    def _put(self, item) -> None:
        self.loop.call_soon_threadsafe(self._arrived, item)

    def _arrived(self, item) -> None:
        self.queue.put_nowait(item)
        if not self.begun.done():
            self.begun.set_result(None)

    # AnswerStream writes the stripped text here
    def write(self, text: str) -> None:
        self._put(("text", text))

    def flush(self) -> None:
        pass

    def text(self, chunk: str) -> None:
        self.stream(chunk)

    def progress(self, message: str) -> None:
        self._put(("progress", message))


async def stream_job(job: Job, events: AnswerEvents, render: Callable[[str, object], str | None],
                     finish: Callable[[object], list[str]], fail: Callable[[Exception], list[str]]
                     ) -> AsyncIterator[str]:
    """The events of ``job``: ``render(kind, value)`` for each of its events (None: nothing to send), then
    ``finish(result)``, or ``fail(error)`` when it failed; the job is cancelled if the client leaves first."""
    done = job.awaitable()
    try:
        while True:
            getter = asyncio.ensure_future(events.queue.get())
            await asyncio.wait({getter, done}, timeout=HEARTBEAT_S, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                sent = render(*getter.result())
                if sent:
                    yield sent
                continue
            getter.cancel()
            if done.done():
                break
            yield ": waiting\n\n"
        while not events.queue.empty():  # what the worker put before it finished
            sent = render(*events.queue.get_nowait())
            if sent:
                yield sent
        error = done.exception()
        for sent in fail(error) if error is not None else finish(done.result()):
            yield sent
    finally:
        job.cancel()  # a no-op once it has finished; the client's leaving otherwise
