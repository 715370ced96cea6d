"""What every route shares: the runner and its worker, the held sessions, the uploaded documents, the answers'
retained-token views, the limits, and the command line's wording of errors; and the waiting on a job that stops it
when the client goes away."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from starlette.requests import Request

from ..answering.documents import Document
from ..answering.runner import Runner
from ..engine import CompressionSettings
from ..errors import UserError
from .documents import DocumentStore
from .errors import ApiError, from_user_error
from .inspections import Inspections
from .sessions import Sessions
from .worker import Cancelled, Job, QueueFull, Relay, Worker

JSON_OVERHEAD = 2**20  # a JSON body may be this much bigger than the document it carries, besides its escaping


@dataclass
class ServerContext:
    """runner: loads the model once (its presenter is ``relay``); describe: a user error's one line (the command
    line's ``message``); settings_for: compression settings from a request's overrides, as the command line parses
    them; queue: how many requests may wait; keep_bytes: the memory cap of the prefixes held; time_limit_s: each
    request's."""

    runner: Runner
    relay: Relay
    describe: Callable[[UserError], str] = str
    settings_for: Callable[[dict], CompressionSettings] | None = None
    queue: int = 8
    keep_bytes: int = 2048 * 2**20
    time_limit_s: float | None = None
    worker: Worker = field(init=False)
    sessions: Sessions = field(init=False)
    store: DocumentStore = field(init=False)
    inspections: Inspections = field(init=False)

    def __post_init__(self):
        self.worker = Worker(self.relay, capacity=self.queue, time_limit_s=self.time_limit_s)
        self.sessions = Sessions(self.runner, self.keep_bytes)
        self.store = DocumentStore()
        self.inspections = Inspections()

    @property
    def document_limit(self) -> int:
        """The size limit of a document in bytes (``--max-document-mb``)."""
        return self.runner.options.reader.max_bytes

    @property
    def json_limit(self) -> int:
        """A JSON body's cap: a document escaped as JSON (at most twice its bytes, mostly), and the rest."""
        return 2 * self.document_limit + JSON_OVERHEAD

    def user_error(self, error: UserError) -> ApiError:
        return from_user_error(error, self.describe)

    def settings(self, overrides) -> CompressionSettings | None:
        """The compression settings of a request's extension field (None: the server's own)."""
        if not overrides:
            return None
        if not isinstance(overrides, dict):
            raise ApiError(400, "snapkv.settings must be an object of compression settings", param="snapkv")
        try:
            return self.settings_for(overrides)
        except UserError as error:
            raise self.user_error(error) from None

    def read_text(self, text: str, source: str) -> Document:
        """A document sent as text (a chat's messages), read as ``ask`` reads one piped in."""
        try:
            return replace(self.runner.read("-", stdin=io.BytesIO(text.encode("utf-8"))), source=source)
        except UserError as error:
            raise self.user_error(error) from None

    def submit(self, work, listener=None) -> Job:
        try:
            return self.worker.submit(work, listener)
        except QueueFull as error:
            raise ApiError(429, str(error), type="rate_limit_error", code="rate_limit_exceeded",
                           headers={"Retry-After": str(error.retry_after)}) from None

    async def outcome(self, request: Request, job: Job, *also: asyncio.Future):
        """Wait for ``job`` (or the first of ``also``), cancelling it if the client disconnects meanwhile; returns
        the job's result once it is done (None while only one of ``also`` is), raising its error as an
        :class:`ApiError`."""
        done = job.awaitable()
        watcher = asyncio.ensure_future(_disconnect(request))
        try:
            await asyncio.wait({done, watcher, *also}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if watcher.done() and not watcher.cancelled() and not done.done():
            job.cancel()
            raise ApiError(499, "the client went away", code="client_closed")
        if not done.done():
            return None
        return self.result(done)

    def result(self, done: asyncio.Future):
        """The result of a finished job; its error raised as an :class:`ApiError`."""
        error = done.exception()
        if error is not None:
            raise self.api_error(error) from error
        return done.result()

    def api_error(self, error: BaseException) -> ApiError:
        """How a job's error is answered: a user's mistake in the command line's words, a stopped job as a
        timeout, anything else as the server's error."""
        if isinstance(error, ApiError):
            return error
        if isinstance(error, UserError):
            return self.user_error(error)
        if isinstance(error, Cancelled):
            return ApiError(408, str(error), code="timeout")
        return ApiError(500, f"{type(error).__name__}: {error}", type="server_error")

    def status(self) -> dict:
        loaded = self.runner.loaded
        from ..answering.report import peak_rss_bytes

        return {"model": loaded.name, "device": str(loaded.device), "queue": self.worker.status(),
                "sessions": self.sessions.status(), "documents": len(self.store.documents),
                "memory": {"peak_rss_bytes": peak_rss_bytes()}}

    def close(self) -> None:
        self.worker.stop()
        self.store.close()


def context_of(request: Request) -> ServerContext:
    """The context of the application serving ``request`` (:func:`~snapkv_cli.server.app.create_app` keeps it in
    the application's state)."""
    return request.app.state.context


async def _disconnect(request: Request) -> None:
    """Returns when the client has disconnected (the request's body already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
