"""What a request may ask of its answer, in the OpenAI API's names: the decoding (``max_tokens``, ``temperature``,
``seed``, ``stop``) and the compression settings of the extension field ``snapkv: {"settings": {...}}``; the chat
API and the documents API read them alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import ApiError
from .sessions import Decoding

if TYPE_CHECKING:
    from .context import ServerContext

EXTENSION = "snapkv"


def _number(body: dict, name: str, kind, low, *, above: bool = False):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind) or (value <= low if above else value < low):
        bound = f"above {low}" if above else f"at least {low}"
        raise ApiError(400, f"{name} must be a number {bound}, got {value!r}", param=name)
    return value


def decoding(body: dict) -> Decoding:
    """The request's decoding options (OpenAI's names)."""
    if body.get("n", 1) != 1:
        raise ApiError(400, "n must be 1: one answer per request", param="n")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)):
        raise ApiError(400, "stop must be a string or a list of non-empty strings", param="stop")
    tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return Decoding(max_new_tokens=_number({"max_tokens": tokens}, "max_tokens", int, 1),
                    temperature=_number(body, "temperature", (int, float), 0),
                    seed=_number(body, "seed", int, -2**63), stop=tuple(stop or ()))


def requested_settings(context: ServerContext, body: dict):
    """The compression settings of the extension field ``snapkv: {"settings": {...}}`` (None: the server's)."""
    extension = body.get(EXTENSION) or {}
    if not isinstance(extension, dict):
        raise ApiError(400, f"{EXTENSION} must be an object", param=EXTENSION)
    return context.settings(extension.get("settings"))
