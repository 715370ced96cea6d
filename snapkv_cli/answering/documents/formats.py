"""The document formats the reader knows, one line each in :data:`FORMATS`.

A format is read either from its bytes (:class:`BinaryFormat`, as PDF is) or as text (:class:`TextFormat`: decoded by
its content, split into pages at form feeds, each page made plain by the format's ``page_text``, as HTML's markup is
removed). A file name ending says a file's format; where none does (stdin, an ending not listed here) the content
does: the first binary format whose ``recognise`` accepts the bytes, else the first text format whose ``recognise``
accepts the decoded text, else plain text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .document import Page
from .html import html_to_text, looks_like_html
from .pdf import is_pdf, pdf_pages


@dataclass(frozen=True)
class BinaryFormat:
    """A format read from its bytes: ``pages(source, data, selection)`` gives the selected pages' text."""

    kind: str  # the Document's kind
    suffixes: tuple[str, ...]  # the file name endings that say it (lower case)
    recognise: Callable[[bytes], bool]
    pages: Callable[[str, bytes, str | None], tuple[Page, ...]]
    label: str | None = None  # how messages and help name it; None: its first ending


@dataclass(frozen=True)
class TextFormat:
    """A format read as text; ``page_text`` (None: the text as it is) makes a page of it plain text."""

    kind: str  # the Document's kind
    suffixes: tuple[str, ...]  # the file name endings that say it (lower case)
    recognise: Callable[[str], bool] | None = None  # None: only its endings say it
    page_text: Callable[[str], str] | None = None
    label: str | None = None  # how messages and help name it; None: its first ending


PLAIN_TEXT = TextFormat("text", (".txt", ".text", ".log", ".rst"))

FORMATS: tuple[BinaryFormat | TextFormat, ...] = (
    BinaryFormat("pdf", (".pdf",), is_pdf, pdf_pages, label="PDF"),
    PLAIN_TEXT,
    TextFormat("markdown", (".md", ".markdown")),
    TextFormat("html", (".html", ".htm"), looks_like_html, html_to_text),
)

# the file name endings read as documents (lower case)
DOCUMENT_SUFFIXES = frozenset(suffix for known in FORMATS for suffix in known.suffixes)


def named_formats(last: str = " or ") -> str:
    """The formats as messages name them, ``PDF, .txt, .md or .html`` (``last=", "``: as help lists them)."""
    labels = [known.label or known.suffixes[0] for known in FORMATS]
    return ", ".join(labels[:-1]) + last + labels[-1]


def format_by_suffix(suffix: str) -> BinaryFormat | TextFormat | None:
    """The format a file name ending (lower case) says, if any."""
    return next((known for known in FORMATS if suffix in known.suffixes), None)


def binary_format_of(data: bytes) -> BinaryFormat | None:
    """The binary format ``data`` says it is, if any."""
    return next((known for known in FORMATS if isinstance(known, BinaryFormat) and known.recognise(data)), None)


def text_format_of(text: str) -> TextFormat:
    """The text format ``text`` says it is: plain text unless a format recognises it."""
    return next((known for known in FORMATS
                 if isinstance(known, TextFormat) and known.recognise is not None and known.recognise(text)),
                PLAIN_TEXT)
