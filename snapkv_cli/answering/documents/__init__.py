"""Documents (PDF, plain text, Markdown or HTML) read into pages of plain text."""

from .encoding import (
    DEFAULT_MAX_DOCUMENT_MB,
    DOCUMENT_SUFFIXES,
    MAX_DOCUMENT_MB_ENV,
    PAGE_SEPARATOR,
    Document,
    Page,
    decode_document_bytes,
    display_path,
    html_to_text,
    load_document,
    max_document_bytes,
    megabytes,
    parse_page_ranges,
    parse_page_spec,
)

__all__ = [
    "DEFAULT_MAX_DOCUMENT_MB",
    "DOCUMENT_SUFFIXES",
    "MAX_DOCUMENT_MB_ENV",
    "PAGE_SEPARATOR",
    "Document",
    "Page",
    "decode_document_bytes",
    "display_path",
    "html_to_text",
    "load_document",
    "max_document_bytes",
    "megabytes",
    "parse_page_ranges",
    "parse_page_spec",
]
