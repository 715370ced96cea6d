"""Load a document (PDF, plain text, Markdown or HTML) into pages of plain text.

The entry point is :func:`load_document`. Every problem a user can fix (a missing
file, an encrypted or scanned PDF, a bad page selection, ...) is raised as a
one-line :class:`~snapkv_cli.errors.UserError` that names the fix.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import typing
import warnings
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from snapkv_cli.errors import UserError

PAGE_SEPARATOR = "\n\n"

_EXTENSION_KINDS = {
    ".pdf": "pdf",
    ".txt": "text",
    ".text": "text",
    ".log": "text",
    ".rst": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
}
DOCUMENT_SUFFIXES = frozenset(_EXTENSION_KINDS)  # the file name endings read as documents (lower case)


@dataclass(frozen=True)
class Page:
    """One page of a document: its 1-based number in the source, and its text."""

    number: int
    text: str


@dataclass(frozen=True)
class Document:
    """A loaded document. Blank pages are left out, so page numbers may skip."""

    source: str  # the path as given, or "<stdin>"
    kind: str  # "pdf", "text", "markdown" or "html"
    pages: tuple[Page, ...]

    @property
    def text(self) -> str:
        """The text of all pages, joined by a blank line."""
        return PAGE_SEPARATOR.join(page.text for page in self.pages)

    def page_spans(self) -> list[tuple[int, int, int]]:
        """``(page_number, start, end)`` character spans of each page within :attr:`text`."""
        spans = []
        start = 0
        for page in self.pages:
            end = start + len(page.text)
            spans.append((page.number, start, end))
            start = end + len(PAGE_SEPARATOR)
        return spans


def load_document(
    path: str,
    pages: str | None = None,
    stdin: typing.TextIO | typing.BinaryIO | None = None,
) -> Document:
    """Read ``path`` ("-" for stdin) and return its text, optionally only the ``pages`` given.

    ``pages`` is a selection such as ``"3-7,10"`` or ``"5-"`` (1-based, inclusive). For
    non-PDF inputs, pages are separated by form feeds.
    """
    if path == "-":
        source = "<stdin>"
        data = _read_stdin(stdin)
        if isinstance(data, str):
            text = data.lstrip("\ufeff")
            kind = "html" if _looks_like_html(text) else "text"
            return _text_document(source, kind, text, pages)
        kind = _sniff_kind(data, strict_utf8=False)
    else:
        source = path
        data = _read_file(path)
        suffix = Path(path).suffix.lower()
        kind = _EXTENSION_KINDS.get(suffix) or _sniff_kind(data, strict_utf8=True)
        if kind is None:
            raise UserError(
                f"unsupported file type '{suffix or '(no extension)'}': "
                "give a PDF, .txt, .md or .html file"
            )
    if kind == "pdf":
        return Document(source, "pdf", _read_pdf(source, data, pages))
    return _text_document(source, kind, decode_text(data), pages)


def parse_page_spec(spec: str, page_count: int, source: str) -> list[int]:
    """Turn a selection like ``"3-7,10"`` into sorted page numbers within ``1..page_count``."""
    has = f"{source} has {page_count} page{'s' if page_count != 1 else ''}"
    selected: set[int] = set()
    for item in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:(-)\s*(\d*)\s*)?", item)
        if match is None:
            raise UserError(
                f"invalid page selection '{spec}': use numbers and ranges like 3-7,10 ({has})"
            )
        first = int(match.group(1))
        last = first if match.group(2) is None else int(match.group(3) or page_count)
        if first == 0 or last == 0:
            raise UserError(f"invalid page selection '{spec}': pages are numbered from 1 ({has})")
        if max(first, last) > page_count:
            raise UserError(
                f"page selection '{spec}' is out of range: {has}; choose pages 1-{page_count}"
            )
        if last < first:
            raise UserError(
                f"invalid page selection '{spec}': range {first}-{last} is reversed, "
                f"write {last}-{first} ({has})"
            )
        selected.update(range(first, last + 1))
    return sorted(selected)


def decode_text(data: bytes) -> str:
    """Decode bytes as UTF-8 (BOM dropped), else cp1252, else latin-1; newlines become ``\\n``."""
    for encoding in ("utf-8-sig", "cp1252"):
        try:
            text = data.decode(encoding)
            break
        except UnicodeDecodeError:
            continue
    else:
        text = data.decode("latin-1")  # maps every byte, so it cannot fail
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read_stdin(stdin: typing.TextIO | typing.BinaryIO | None) -> bytes | str:
    stream = stdin if stdin is not None else sys.stdin.buffer
    with contextlib.suppress(AttributeError, ValueError, OSError):
        if stream.isatty():
            raise UserError(
                "no document on stdin: pipe one in (e.g. cat report.pdf | ...) or give a file path"
            )
    try:
        return stream.read()
    except OSError as exc:
        reason = exc.strerror or exc
        raise UserError(f"cannot read stdin: {reason}; pipe a document in or give a path") from None


def _read_file(path: str) -> bytes:
    file = Path(path)
    if file.is_dir():
        raise UserError(f"'{path}' is a directory: give the path of a document file inside it")
    try:
        return file.read_bytes()
    except FileNotFoundError:
        raise UserError(f"file not found: '{path}'; check the path and spelling") from None
    except PermissionError:
        raise UserError(
            f"cannot read '{path}': permission denied; check its permissions (e.g. chmod +r)"
        ) from None
    except OSError as exc:
        raise UserError(f"cannot read '{path}': {exc.strerror or exc}; check the path") from None


def _sniff_kind(data: bytes, strict_utf8: bool) -> str | None:
    """Guess the kind of untyped bytes; ``None`` if they are not a document we can read."""
    if data.startswith(b"%PDF-"):
        return "pdf"
    if strict_utf8:
        if b"\x00" in data:
            return None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            return None
    else:
        text = decode_text(data[:4096])
    return "html" if _looks_like_html(text) else "text"


def _looks_like_html(text: str) -> bool:
    head = text.lstrip().lower()
    return head.startswith("<!doctype html") or head.startswith("<html")


def _text_document(source: str, kind: str, text: str, pages: str | None) -> Document:
    """Split text on form feeds into pages, keep the selected non-blank ones, convert HTML."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    chunks = text.split("\f")
    if len(chunks) > 1 and not chunks[-1].strip():
        chunks.pop()  # a trailing form feed ends the last page; it does not start a new one
    numbers = parse_page_spec(pages, len(chunks), source) if pages else range(1, len(chunks) + 1)
    result = []
    for number in numbers:
        chunk = html_to_text(chunks[number - 1]) if kind == "html" else chunks[number - 1]
        if chunk.strip():
            result.append(Page(number, chunk.strip()))
    if not result:
        where = f" in pages {pages}" if pages else ""
        raise UserError(f"'{source}' has no text{where}: give a document that contains some text")
    return Document(source, kind, tuple(result))


@contextlib.contextmanager
def _quiet_pypdf() -> typing.Iterator[None]:
    """Silence pypdf's log messages and warnings about recoverable damage."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _read_pdf(source: str, data: bytes, pages: str | None) -> tuple[Page, ...]:
    """Extract the text of the selected pages of a PDF."""
    import pypdf  # lazy: importing pypdf is slow and only PDFs need it
    from pypdf.errors import DependencyError

    problem = None
    if b"%PDF-" not in data[:1024]:
        problem = "no PDF header"
    elif b"%%EOF" not in data[-2048:]:
        problem = "no end-of-file marker"  # pypdf would silently read only part of the file
    if problem:
        raise UserError(f"could not read PDF '{source}': {problem}; is it truncated or damaged?")
    try:
        with _quiet_pypdf():
            reader = pypdf.PdfReader(io.BytesIO(data))
            if reader.is_encrypted:
                try:
                    decrypted = reader.decrypt("")
                except DependencyError:
                    decrypted = pypdf.PasswordType.NOT_DECRYPTED
                if decrypted == pypdf.PasswordType.NOT_DECRYPTED:
                    raise UserError(
                        f"'{source}' is encrypted; decrypt it first, "
                        "e.g. qpdf --decrypt in.pdf out.pdf"
                    )
            page_count = len(reader.pages)
            if page_count == 0:
                raise UserError(f"'{source}' has no pages: give a PDF with some text in it")
            everything = range(1, page_count + 1)
            numbers = parse_page_spec(pages, page_count, source) if pages else everything
            texts = [(n, reader.pages[n - 1].extract_text() or "") for n in numbers]
    except UserError:
        raise
    except Exception as exc:  # pypdf raises many kinds of errors for damaged files
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UserError(
            f"could not read PDF '{source}': {detail}; is it truncated or damaged?"
        ) from None
    result = tuple(Page(number, text.strip()) for number, text in texts if text.strip())
    if not result:
        where = f" in pages {pages}" if pages else ""
        raise UserError(
            f"'{source}' has no extractable text{where}; it looks scanned; "
            "run OCR first, e.g. ocrmypdf in.pdf out.pdf"
        )
    return result


_SKIPPED_TAGS = {"script", "style", "noscript", "template", "head"}
_LINE_TAGS = {"br", "div", "li", "tr", "dt", "dd", "caption", "figcaption", "summary", "option"}
_PARAGRAPH_TAGS = {
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "dl", "table", "blockquote", "pre",
    "hr", "section", "article", "header", "footer", "nav", "aside", "main", "figure",
    "form", "fieldset", "address", "details", "body",
}  # fmt: skip
_CELL_TAGS = {"td", "th"}


class _HTMLTextExtractor(HTMLParser):
    """Collects the visible text of an HTML page, with line breaks at block elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping: list[str] = []  # open skipped elements, innermost last
        self._pre_depth = 0
        self._pending = ""  # separator to write before the next text ("", " ", "\n" or "\n\n")

    def _separate(self, separator: str) -> None:
        if self.parts and len(separator) > len(self._pending):
            self._pending = separator

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body" and "head" in self._skipping:
            self._skipping.remove("head")  # an unclosed <head> ends where <body> starts
        if tag in _SKIPPED_TAGS:
            self._skipping.append(tag)
        elif tag == "pre":
            self._pre_depth += 1
        self._break_for(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._skipping:
            while self._skipping.pop() != tag:
                pass
        elif tag == "pre" and self._pre_depth:
            self._pre_depth -= 1
        self._break_for(tag)

    def _break_for(self, tag: str) -> None:
        if tag in _PARAGRAPH_TAGS:
            self._separate("\n\n")
        elif tag in _LINE_TAGS:
            self._separate("\n")
        elif tag in _CELL_TAGS:
            self._separate(" ")

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        if not self._pre_depth:
            data = re.sub(r"\s+", " ", data)
            if self._pending or not self.parts or self.parts[-1].endswith((" ", "\n")):
                data = data.lstrip(" ")
            if not data:
                return
        if self._pending:
            if self.parts:
                self.parts[-1] = self.parts[-1].rstrip(" ")
            self.parts.append(self._pending)
            self._pending = ""
        self.parts.append(data)


def html_to_text(html: str) -> str:
    """The visible text of an HTML document: no scripts, styles or head, entities decoded."""
    extractor = _HTMLTextExtractor()
    extractor.feed(html)
    extractor.close()
    return "".join(extractor.parts).strip()
