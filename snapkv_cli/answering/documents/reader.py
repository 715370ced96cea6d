"""The one document reader: a path or stdin, read within the size limit, its format told, its selected pages read.

:func:`load_document` reads one document; a :class:`DocumentReader` is a run's way of reading (its page selection
and size limit, built once from the run's options): every command and the batch driver read through one.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path

from snapkv_cli.errors import BinaryDocument, UserError

from .document import Document
from .encoding import decode_document_bytes, refuse_binary_text
from .formats import BinaryFormat, binary_format_of, format_by_suffix, named_formats, text_format_of
from .source import display_path, max_document_bytes, megabytes, read_file, read_stdin
from .text import text_pages


def load_document(
    path: str,
    pages: str | None = None,
    stdin: typing.TextIO | typing.BinaryIO | None = None,
    max_bytes: int | None = None,
) -> Document:
    """Read ``path`` ("-" for stdin) and return its text, optionally only the ``pages`` given.

    ``pages`` is a selection such as ``"3-7,10"`` or ``"5-"`` (1-based, inclusive). For
    non-PDF inputs, pages are separated by form feeds. Only regular files and stdin are read, at most
    ``max_bytes`` (default :func:`~.source.max_document_bytes`); text is decoded by its content (byte order marks,
    UTF-8, UTF-16/32, legacy encodings), and binary content is refused whatever the extension.
    """
    limit = max_document_bytes() if max_bytes is None else max_bytes
    if path == "-":
        source, suffix, known = "<stdin>", None, None
        data = read_stdin(stdin, limit)
    else:
        source = display_path(path)
        data = read_file(path, source, limit)
        suffix = Path(source).suffix.lower()
        known = format_by_suffix(suffix)
    if isinstance(data, str):  # a text stream: decoded already
        text = data.lstrip("\ufeff")
        refuse_binary_text(source, text)
    else:
        known = known or binary_format_of(data)
        if isinstance(known, BinaryFormat):
            return Document(source, known.kind, known.pages(source, data, pages))
        try:  # an unknown extension is read only if the bytes say plainly that they are text
            text = decode_document_bytes(data, source, legacy=suffix is None or known is not None)
        except BinaryDocument:
            if suffix is not None and known is None:  # a file of a type we do not know, and not text either
                raise UserError(
                    f"unsupported file type '{suffix or '(no extension)'}': give a {named_formats()} file"
                ) from None
            raise
    known = known or text_format_of(text)
    return Document(source, known.kind, text_pages(source, text, pages, known.page_text))


@dataclass(frozen=True)
class DocumentReader:
    """How a run reads its documents: the pages to keep (a selection such as ``"3-7,10"``; None: every page) and the
    size limit in MB (None: :func:`~.source.max_document_bytes`)."""

    pages: str | None = None
    max_document_mb: float | None = None

    @property
    def max_bytes(self) -> int:
        """The size limit in bytes (:func:`~.source.max_document_bytes` when the reader was given none)."""
        limit = megabytes(self.max_document_mb)
        return max_document_bytes() if limit is None else limit

    def read(self, path: str, *, pages: str | None = None,
             stdin: typing.TextIO | typing.BinaryIO | None = None) -> Document:
        """The document at ``path`` (``-``: stdin), with ``pages`` (a batch job's own selection) else the reader's,
        within the reader's size limit."""
        return load_document(path, pages=pages or self.pages, stdin=stdin, max_bytes=self.max_bytes)
