"""Request bodies read under a cap: a declared ``Content-Length`` over it is refused before any byte is read, and a
body that streams in without one is refused as soon as it passes the cap, never read whole."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from ..views.units import human_bytes
from .errors import ApiError


def capped(request: Request, limit: int, too_large: Callable[[int], ApiError]) -> Request:
    """``request`` whose body, however it is read (``json()``, ``form()``, ``stream()``), raises ``too_large(bytes)``
    once more than ``limit`` bytes are declared or have come in; the refusal closes the connection, so that the rest
    of the body is not read either."""
    def refused(size: int) -> ApiError:
        error = too_large(size)
        error.headers["Connection"] = "close"
        return error

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise refused(int(declared))
    received = 0

    async def receive():
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise refused(received)
        return message

    return Request(request.scope, receive)


async def read_json(request: Request, limit: int) -> dict:
    """The JSON object of a request body of at most ``limit`` bytes; anything else is refused in OpenAI's words."""
    import json

    body = bytearray()
    async for chunk in capped(request, limit, lambda size: ApiError(
            413, f"the request body is over the {human_bytes(limit)} limit for documents; send a smaller document",
            code="request_too_large")).stream():
        body += chunk
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(400, f"the request body is not valid JSON: {error}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    return data
