"""Errors as the server answers them: OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, on every
route, with the command line's wording for a user's mistake (the ``describe`` the app is given).

:class:`ApiError` is what a route raises for a request it refuses; :func:`status_of` is the HTTP status a library
error becomes.
"""

from __future__ import annotations

from ..errors import BinaryDocument, DocumentTooLarge, PromptTooLong, TemplateTooLong, UserError


class ApiError(Exception):
    """A refused request: its HTTP ``status``, the message, OpenAI's error ``type`` and ``code``, the ``param`` at
    fault, and extra response headers (``Retry-After``)."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type, code, param
        self.headers = headers or {}

    def body(self) -> dict:
        return error_body(self.message, type=self.type, code=self.code, param=self.param)


def error_body(message: str, *, type: str = "invalid_request_error", code: str | None = None,
               param: str | None = None) -> dict:
    """The JSON of an error, as OpenAI's API writes it."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def status_of(error: UserError) -> tuple[int, str | None]:
    """The HTTP status and OpenAI ``code`` of a user's mistake."""
    if isinstance(error, DocumentTooLarge):
        return 413, "document_too_large"
    if isinstance(error, PromptTooLong | TemplateTooLong):
        return 400, "context_length_exceeded"
    if isinstance(error, BinaryDocument):
        return 415, "unsupported_document"
    return 400, None


def from_user_error(error: UserError, describe) -> ApiError:
    """The :class:`ApiError` of a user's mistake, worded by ``describe`` (the command line's ``message``)."""
    status, code = status_of(error)
    return ApiError(status, describe(error), code=code)
