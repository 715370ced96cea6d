"""Serving the application over HTTP with uvicorn: in the foreground (``snapkv serve``) or on a thread (tests, a
program that embeds the server); either way the URL is known once the socket is bound (port 0: a free one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import uvicorn


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_started: Callable[[str], None] | None):
        super().__init__(config)
        self.on_started = on_started

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started and self.on_started is not None:
            self.on_started(self.url)

    @property
    def url(self) -> str:
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


class Listener:
    """``app`` served on ``host``:``port``; ``on_started(url)`` is called once it listens."""

    def __init__(self, app, host: str, port: int, *, on_started: Callable[[str], None] | None = None):
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=5)
        self.server = _Server(config, on_started)
        self.thread: threading.Thread | None = None

    def run(self) -> None:
        """Serve until interrupted (Ctrl-C, SIGTERM)."""
        self.server.run()

    def start(self, timeout_s: float = 30.0) -> str:
        """Serve on a thread; returns the URL once it listens."""
        self.thread = threading.Thread(target=self.server.run, name="snapkv-server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self.server.url

    def stop(self) -> None:
        """Stop serving (the worker stops and the uploads are removed) and wait for the thread."""
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join()
