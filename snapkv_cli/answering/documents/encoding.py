"""Load a document (PDF, plain text, Markdown or HTML) into pages of plain text.

The entry point is :func:`load_document`. Every problem a user can fix (a missing
file, an encrypted or scanned PDF, a bad page selection, ...) is raised as a
one-line :class:`~snapkv_cli.errors.UserError` that names the fix.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import stat
import sys
import typing
import warnings
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from snapkv_cli.errors import (
    BinaryDocument,
    DocumentTooLarge,
    FileNameTooLong,
    InvalidValue,
    NotARegularFile,
    UserError,
)

PAGE_SEPARATOR = "\n\n"
MAX_DOCUMENT_MB_ENV = "SNAPKV_MAX_DOCUMENT_MB"
DEFAULT_MAX_DOCUMENT_MB = 256

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


def max_document_bytes() -> int:
    """The size limit for one document: ``$SNAPKV_MAX_DOCUMENT_MB`` megabytes, else :data:`DEFAULT_MAX_DOCUMENT_MB`."""
    value = os.environ.get(MAX_DOCUMENT_MB_ENV, "").strip()
    if not value:
        return DEFAULT_MAX_DOCUMENT_MB * 2**20
    try:
        megabytes = float(value)
    except ValueError:
        megabytes = -1.0
    if not 0 < megabytes < float("inf"):
        raise InvalidValue(MAX_DOCUMENT_MB_ENV, value, "a positive number of megabytes")
    return int(megabytes * 2**20)


def megabytes(limit_mb: float | None) -> int | None:
    """A size limit given in MB (``max_document_mb``) in bytes, for :func:`load_document`'s ``max_bytes``; None stays
    None (the default limit, :func:`max_document_bytes`)."""
    return None if limit_mb is None else int(limit_mb * 2**20)


def display_path(path: str) -> str:
    """``path`` as text that can always be printed and stored: bytes that are not UTF-8 become ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def load_document(
    path: str,
    pages: str | None = None,
    stdin: typing.TextIO | typing.BinaryIO | None = None,
    max_bytes: int | None = None,
) -> Document:
    """Read ``path`` ("-" for stdin) and return its text, optionally only the ``pages`` given.

    ``pages`` is a selection such as ``"3-7,10"`` or ``"5-"`` (1-based, inclusive). For
    non-PDF inputs, pages are separated by form feeds. Only regular files and stdin are read, at most
    ``max_bytes`` (default :func:`max_document_bytes`); text is decoded by its content (byte order marks, UTF-8,
    UTF-16/32, legacy encodings), and binary content is refused whatever the extension.
    """
    limit = max_document_bytes() if max_bytes is None else max_bytes
    if path == "-":
        source = "<stdin>"
        data = _read_stdin(stdin, limit)
        if isinstance(data, str):
            text = data.lstrip("\ufeff")
            _refuse_binary_text(source, text)
            kind = "html" if _looks_like_html(text) else "text"
            return _text_document(source, kind, text, pages)
        kind = "pdf" if data.startswith(b"%PDF-") else None
        suffix, legacy = None, True
    else:
        source = display_path(path)
        data = _read_file(path, source, limit)
        suffix = Path(source).suffix.lower()
        kind = _EXTENSION_KINDS.get(suffix)
        legacy = kind is not None  # an unknown extension is read only if the bytes say plainly that they are text
        if kind is None and data.startswith(b"%PDF-"):
            kind = "pdf"
    if kind == "pdf":
        return Document(source, "pdf", _read_pdf(source, data, pages))
    try:
        text = decode_document_bytes(data, source, legacy=legacy)
    except BinaryDocument:
        if suffix is not None and kind is None:  # a file of a type we do not know, and not text either
            raise UserError(
                f"unsupported file type '{suffix or '(no extension)'}': "
                "give a PDF, .txt, .md or .html file"
            ) from None
        raise
    if kind is None:
        kind = "html" if _looks_like_html(text) else "text"
    return _text_document(source, kind, text, pages)


def parse_page_ranges(spec: str, has: str | None = None) -> list[tuple[int, int | None]]:
    """The ranges of a page selection such as ``"3-7,10"`` or ``"5-"``: ``(first, last)``, 1-based and inclusive,
    ``last`` None for "to the end". Checked without the document: numbers and ranges only, numbered from 1, none
    reversed. ``has`` (e.g. "report.pdf has 3 pages") is added to the messages when the document is known."""
    context = f" ({has})" if has else ""
    ranges: list[tuple[int, int | None]] = []
    for item in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:(-)\s*(\d*)\s*)?", item)
        if match is None:
            raise UserError(f"invalid page selection '{spec}': use numbers and ranges like 3-7,10{context}")
        first = int(match.group(1))
        last = first if match.group(2) is None else int(match.group(3)) if match.group(3) else None
        if first == 0 or last == 0:
            raise UserError(f"invalid page selection '{spec}': pages are numbered from 1{context}")
        if last is not None and last < first:
            raise UserError(
                f"invalid page selection '{spec}': range {first}-{last} is reversed, write {last}-{first}{context}"
            )
        ranges.append((first, last))
    return ranges


def parse_page_spec(spec: str, page_count: int, source: str) -> list[int]:
    """Turn a selection like ``"3-7,10"`` into sorted page numbers within ``1..page_count``."""
    has = f"{source} has {page_count} page{'s' if page_count != 1 else ''}"
    selected: set[int] = set()
    for first, last in parse_page_ranges(spec, has):
        last = page_count if last is None else last
        if max(first, last) > page_count:
            raise UserError(
                f"page selection '{spec}' is out of range: {has}; choose pages 1-{page_count}"
            )
        selected.update(range(first, last + 1))
    return sorted(selected)


def decode_document_bytes(data: bytes, source: str, *, legacy: bool = True) -> str:
    """The text of document bytes, newlines made ``\\n``; binary content (zero bytes, many control characters) is
    refused with a UserError.

    A byte order mark (UTF-8, UTF-16, UTF-32) decides; else UTF-16/32 without a mark when the zero bytes fall as
    they do there; else UTF-8, keeping it (bad bytes become U+FFFD) when most non-ASCII sequences in it are valid
    UTF-8; else a legacy encoding: cp1252 for mostly-Latin text, a guess (charset-normalizer) for other scripts,
    latin-1 as the last resort (it maps every byte). ``legacy=False`` accepts only text that declares or proves its
    encoding (a byte order mark, UTF-8, UTF-16/32).
    """
    text = _decode(data, legacy=legacy)
    if text is None:
        binary = b"\x00" in data
        raise BinaryDocument(source, "it holds zero bytes, as binary files do" if binary else
                             "it is not UTF-8 or UTF-16/32 text")
    _refuse_binary_text(source, text)
    return text.replace("\r\n", "\n").replace("\r", "\n")


_BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_SAMPLE = 1 << 16
# C0 controls other than tab, newlines, form feed and escape (ANSI colours in logs), DEL and the C1 controls
_CONTROL = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
_SURROGATE_ESCAPES = re.compile("[\udc80-\udcff]")
_NON_ASCII = re.compile("[^\x00-\x7f\udc80-\udcff]")


def _decode(data: bytes, legacy: bool) -> str | None:
    """The text of ``data``, or None when ``legacy`` is off and it is not Unicode text."""
    for mark, encoding in _BOMS:
        if data.startswith(mark):
            return data[len(mark):].decode(encoding, errors="replace")
    wide = _wide_text(data)
    if wide is not None:
        return wide
    if b"\x00" in data:
        return None  # not UTF-8 text, nor any single-byte encoding of text
    probe = data.decode("utf-8", errors="surrogateescape")
    invalid = len(_SURROGATE_ESCAPES.findall(probe))
    if not invalid:
        return probe
    valid_non_ascii = len(_NON_ASCII.findall(probe))
    if valid_non_ascii >= invalid:  # mostly UTF-8 with a few damaged bytes: keep it, marking the damage
        return data.decode("utf-8", errors="replace")
    return _decode_legacy(data) if legacy else None


def _wide_text(data: bytes) -> str | None:
    """UTF-32 or UTF-16 (either byte order) without a byte order mark, judged by where the zero bytes fall: mostly
    Latin text in UTF-16 LE has a zero in nearly every second byte and almost never in the first."""
    sample = data[:_SAMPLE]
    for width, encoding, zero_columns, busy_column in (
        (4, "utf-32-le", (2, 3), 0), (4, "utf-32-be", (0, 1), 3),
        (2, "utf-16-le", (1,), 0), (2, "utf-16-be", (0,), 1),
    ):
        usable = len(sample) - len(sample) % width
        if usable < 2 * width:
            continue
        units = usable // width
        zeros = [sample[column:usable:width].count(0) / units for column in range(width)]
        threshold = 0.98 if width == 4 else 0.3
        if zeros[busy_column] > 0.02 or min(zeros[column] for column in zero_columns) < threshold:
            continue
        whole = len(data) - len(data) % width
        try:
            text = data[:whole].decode(encoding)
        except UnicodeDecodeError:
            continue
        return text + ("\ufffd" if whole < len(data) else "")
    return None


def _decode_legacy(data: bytes) -> str:
    """A single- or multi-byte legacy encoding: cp1252 for mostly-Latin text, else charset-normalizer's guess."""
    try:
        western = data.decode("cp1252")
    except UnicodeDecodeError:
        western = None
    high_bytes = len(data) - len(data.translate(None, bytes(range(0x80, 0x100))))
    if western is not None and (high_bytes < 16 or _mostly_ascii_letters(western[:_SAMPLE * 16])):
        return western
    if high_bytes >= 16:  # enough evidence for a statistical guess (Cyrillic, Greek, CJK, ...)
        guessed = _guess_encoding(data)
        if guessed is not None:
            return guessed
    return western if western is not None else data.decode("latin-1")


def _mostly_ascii_letters(text: str) -> bool:
    """Western European text: accented letters are a minority of the letters (Cyrillic read as cp1252 is not)."""
    letters = re.findall(r"[^\W\d_]", text)
    return len([c for c in letters if c > "\x7f"]) <= 0.3 * len(letters)


def _guess_encoding(data: bytes) -> str | None:
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # an optional helper: without it, cp1252 or latin-1
        return None
    best = from_bytes(data).best()
    return None if best is None else str(best)


def _refuse_binary_text(source: str, text: str) -> None:
    """Raise :class:`BinaryDocument` for decoded text that is not text: a zero byte, or control characters
    (:data:`_CONTROL`) making up more than 1% of its first ``16 * _SAMPLE`` characters (one is always allowed)."""
    if "\x00" in text:
        raise BinaryDocument(source, "it holds zero bytes, as binary files do")
    controls = len(_CONTROL.findall(text[:_SAMPLE * 16]))
    if controls > max(1, min(len(text), _SAMPLE * 16) // 100):
        raise BinaryDocument(source, f"it holds {controls} control characters, as binary files do")


def _read_stdin(stdin: typing.TextIO | typing.BinaryIO | None, limit: int) -> bytes | str:
    stream = stdin if stdin is not None else sys.stdin.buffer
    with contextlib.suppress(AttributeError, ValueError, OSError):
        if stream.isatty():
            raise UserError(
                "no document on stdin: pipe one in (e.g. cat report.pdf | ...) or give a file path"
            )
    try:
        data = stream.read(limit + 1)
    except OSError as exc:
        reason = exc.strerror or exc
        raise UserError(f"cannot read stdin: {reason}; pipe a document in or give a path") from None
    if len(data) > limit:
        raise DocumentTooLarge("<stdin>", limit, limit, MAX_DOCUMENT_MB_ENV)
    return data


_FILE_TYPES = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(descriptor: int, source: str, limit: int) -> None:
    """Refuse (closing ``descriptor``) anything but a regular file within ``limit`` bytes."""
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise UserError(f"'{source}' is a directory: give the path of a document file inside it")
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _FILE_TYPES if test(info.st_mode)), "not a regular file")
            raise NotARegularFile(source, kind)
        if info.st_size > limit:
            raise DocumentTooLarge(source, info.st_size, limit, MAX_DOCUMENT_MB_ENV)
    except BaseException:
        os.close(descriptor)
        raise


def _read_file(path: str, source: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``: opened without blocking, checked with ``fstat``, at most ``limit``."""
    # os.open makes its descriptors non-inheritable itself (O_CLOEXEC where there is one)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags)  # O_NONBLOCK: a FIFO without a writer cannot hang the open
    except FileNotFoundError:
        raise UserError(f"file not found: '{source}'; check the path and spelling") from None
    except PermissionError:
        raise UserError(
            f"cannot read '{source}': permission denied; check its permissions (e.g. chmod +r)"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            longest = max(len(os.fsencode(part)) for part in Path(path).parts)
            raise FileNameTooLong(source, longest) from None
        raise UserError(f"cannot read '{source}': {exc.strerror or exc}; check the path") from None
    _check_regular(descriptor, source, limit)
    with open(descriptor, "rb") as file:
        try:
            data = file.read(limit + 1)
        except OSError as exc:
            raise UserError(f"cannot read '{source}': {exc.strerror or exc}; check the file") from None
    if len(data) > limit:  # it grew while we read it
        raise DocumentTooLarge(source, len(data), limit, MAX_DOCUMENT_MB_ENV)
    return data


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
    elif b"%%EOF" not in data.rstrip(b"\x00\t\n\f\r ")[-2048:]:  # padding after the marker is harmless
        problem = "no end-of-file marker"  # pypdf would silently read only part of the file
    if problem:
        raise UserError(f"could not read PDF '{source}': {problem}; is it truncated or damaged?")
    try:
        with _quiet_pypdf():
            try:  # pypdf tries the empty password already when it opens an encrypted file
                reader = pypdf.PdfReader(io.BytesIO(data))
                locked = reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED
            except DependencyError:  # AES encryption, and no cryptography package to undo it
                locked = True
            if locked:
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
                # all trailing white space: a <pre> that ends in a line break is still followed by one blank line
                self.parts[-1] = self.parts[-1].rstrip()
            self.parts.append(self._pending)
            self._pending = ""
        self.parts.append(data)


def html_to_text(html: str) -> str:
    """The visible text of an HTML document: no scripts, styles or head, entities decoded.

    Markup the parser rejects (it raises on some malformed declarations) falls back to removing tags.
    """
    extractor = _HTMLTextExtractor()
    try:
        extractor.feed(html)
        extractor.close()
    except Exception:  # html.parser raises AssertionError on e.g. "<![x[": keep the text, drop the tags
        return _strip_tags(html)
    return "".join(extractor.parts).strip()


def _strip_tags(html: str) -> str:
    import html as entities

    hidden = "|".join(sorted(_SKIPPED_TAGS))
    text = re.sub(rf"<({hidden})\b.*?</\1\s*>", " ", html, flags=re.IGNORECASE | re.DOTALL)
    text = entities.unescape(re.sub(r"<[^>]*>", " ", text))
    return "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
