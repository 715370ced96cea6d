"""PDF into pages: the text pypdf extracts from each selected page (pypdf is imported only when a PDF is read)."""

from __future__ import annotations

import contextlib
import io
import logging
import typing
import warnings

from snapkv_cli.errors import UserError

from .document import Page
from .pages import parse_page_spec


def is_pdf(data: bytes) -> bool:
    """Whether ``data`` starts as a PDF does (for stdin and file names that do not say)."""
    return data.startswith(b"%PDF-")


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


def pdf_pages(source: str, data: bytes, pages: str | None) -> tuple[Page, ...]:
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
