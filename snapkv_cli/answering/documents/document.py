"""A document as the answer path takes it: pages of plain text, numbered as in the source."""

from __future__ import annotations

from dataclasses import dataclass

PAGE_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Page:
    """One page of a document: its 1-based number in the source, and its text."""

    number: int
    text: str


@dataclass(frozen=True)
class Document:
    """A loaded document. Blank pages are left out, so page numbers may skip."""

    source: str  # the path as given, or "<stdin>"
    kind: str  # its format's kind (:data:`~.formats.FORMATS`): "pdf", "text", "markdown" or "html"
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
