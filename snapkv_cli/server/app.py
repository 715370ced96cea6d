"""The server's ASGI application: the routes of the documents API, the OpenAI-compatible API, health and status,
and the web page, behind the :class:`~snapkv_cli.server.security.Guard`; every error in OpenAI's shape."""

from __future__ import annotations

import contextlib
from importlib import resources

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from . import documents_routes, openai_routes
from .context import ServerContext
from .errors import ApiError, error_body
from .security import Guard


def page() -> str:
    """The web page (package data: no network needed)."""
    return (resources.files("snapkv_cli.server") / "page.html").read_text(encoding="utf-8")


def create_app(context: ServerContext, *, api_key: str | None = None) -> Guard:
    """The application serving ``context``'s model; ``api_key``: the key every request must carry (None: none, and
    then only requests addressed to a loopback name are served)."""
    html = page()

    async def index(request: Request):
        return HTMLResponse(html, headers={"Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'; "
                                                                      "script-src 'unsafe-inline'",
                                           "X-Content-Type-Options": "nosniff"})

    async def health(request: Request):
        return JSONResponse({"status": "ok"})

    async def status(request: Request):
        return JSONResponse(context.status())

    async def api_error(request: Request, error: ApiError):
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    async def http_error(request: Request, error: HTTPException):
        return JSONResponse(error_body(str(error.detail), code=str(error.status_code)),
                            status_code=error.status_code, headers=error.headers)

    async def server_error(request: Request, error: Exception):
        api = context.api_error(error)
        return JSONResponse(api.body(), status_code=api.status)

    app = Starlette(
        routes=[Route("/", index, methods=["GET"]), Route("/health", health, methods=["GET"]),
                Route("/api/status", status, methods=["GET"]),
                *documents_routes.ROUTES, *openai_routes.ROUTES],
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: server_error},
        lifespan=lambda app: _closing(context))
    app.state.context = context  # the routes find it here (context_of), as whoever embeds the server does
    return Guard(app, api_key=api_key)


@contextlib.asynccontextmanager
async def _closing(context: ServerContext):
    """The application's lifetime: when it ends, the worker stops and the uploaded documents are removed."""
    yield
    context.close()
