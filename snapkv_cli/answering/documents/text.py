"""Text formats into pages: decoded text split at form feeds, the selected non-blank pages kept."""

from __future__ import annotations

from collections.abc import Callable

from snapkv_cli.errors import UserError

from .document import Page
from .pages import parse_page_spec


def text_pages(source: str, text: str, pages: str | None,
               page_text: Callable[[str], str] | None = None) -> tuple[Page, ...]:
    """The selected non-blank pages of ``text`` (pages end at form feeds), each made plain by ``page_text`` (HTML:
    its visible text) when the format has one."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    chunks = text.split("\f")
    if len(chunks) > 1 and not chunks[-1].strip():
        chunks.pop()  # a trailing form feed ends the last page; it does not start a new one
    numbers = parse_page_spec(pages, len(chunks), source) if pages else range(1, len(chunks) + 1)
    result = []
    for number in numbers:
        chunk = page_text(chunks[number - 1]) if page_text is not None else chunks[number - 1]
        if chunk.strip():
            result.append(Page(number, chunk.strip()))
    if not result:
        where = f" in pages {pages}" if pages else ""
        raise UserError(f"'{source}' has no text{where}: give a document that contains some text")
    return tuple(result)
