"""Who may talk to the server: loopback by default, an API key on every request otherwise, no other site's pages.

:func:`check_binding` refuses, before anything loads, to listen beyond loopback without a key.
:class:`Guard` is the ASGI middleware in front of every route: it compares the key a request carries (``Authorization:
Bearer KEY``, as OpenAI clients send it, or HTTP Basic with the key as password, as a browser sends it once asked)
with the server's in constant time, and turns away requests a browser makes on behalf of another site: a ``Host``
that is not the server's own name while no key is set (DNS rebinding) and an ``Origin`` that is not the server's
(a form posted from another page). No CORS headers are ever sent, so other sites' scripts cannot read answers.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json

from ..errors import UserError
from .errors import error_body

API_KEY_ENV = "SNAPKV_API_KEY"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine only."""
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(host: str, api_key: str | None) -> None:
    """Refuse to listen on a non-loopback ``host`` without an API key."""
    if not is_loopback(host) and not api_key:
        raise UserError(f"listening on {host} lets other machines use the model: set an API key (--api-key or "
                        f"{API_KEY_ENV}), or listen on 127.0.0.1")


def presented_key(headers: dict[bytes, bytes]) -> str | None:
    """The key a request carries: ``Authorization: Bearer KEY``, or ``Basic`` with the key as the password."""
    authorization = headers.get(b"authorization", b"").decode("latin-1").strip()
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() != "basic":
        return None
    try:
        return base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[2]
    except (binascii.Error, UnicodeDecodeError):
        return None


def key_matches(presented: str | None, expected: str) -> bool:
    """Constant-time comparison of the presented key with the server's."""
    return hmac.compare_digest((presented or "").encode("utf-8"), expected.encode("utf-8"))


def _host_name(host_header: str) -> str:
    """The name in a ``Host`` or ``Origin`` authority, without its port."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0]
    return host_header.rpartition(":")[0] if host_header.count(":") == 1 else host_header


class Guard:
    """ASGI middleware: every HTTP request must pass the checks above before it reaches ``app``.

    ``page_paths``: paths a browser opens itself (the web page), whose refusal asks for the key with HTTP Basic so
    that the browser prompts for it and sends it with the page's own requests.
    """

    def __init__(self, app, *, api_key: str | None, page_paths: frozenset[str] = frozenset({"/"})):
        self.app, self.api_key, self.page_paths = app, api_key, page_paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin", b"").decode("latin-1")
        if self.api_key is None and not is_loopback(_host_name(host)):
            return await refuse(send, 403, f"host {host!r} is not this server's loopback name: open it as "
                                           "http://127.0.0.1 or http://localhost", "forbidden")
        if origin and origin.partition("://")[2] != host:  # "null" too: a sandboxed or local page
            return await refuse(send, 403, "requests from another site's pages are refused", "forbidden")
        if self.api_key is not None and not key_matches(presented_key(headers), self.api_key):
            given = presented_key(headers) is not None
            wording = "the API key is wrong" if given else "an API key is needed"
            challenge = [(b"www-authenticate", b'Basic realm="snapkv"')] if scope["path"] in self.page_paths else []
            return await refuse(send, 401, f"{wording}: send it as 'Authorization: Bearer KEY'", "invalid_api_key",
                                challenge)
        return await self.app(scope, receive, send)


async def refuse(send, status: int, message: str, code: str, headers: list | None = None) -> None:
    """Answer with an error in OpenAI's shape, before the request reaches a route."""
    body = json.dumps(error_body(message, code=code)).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
