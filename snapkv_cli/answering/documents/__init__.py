"""Documents (PDF, plain text, Markdown, HTML, or stdin) read into pages of plain text.

:mod:`.reader` is the one way in: :func:`load_document`, and the :class:`DocumentReader` a run reads through (page
selection and size limit). It takes the bytes from :mod:`.source` (a regular file or stdin, within the size limit),
tells the format by :mod:`.formats` and has the format read the pages: :mod:`.pdf` from the bytes, the text formats
by :mod:`.text` (pages at form feeds) once :mod:`.encoding` has decoded them, HTML made plain by :mod:`.html`. Page
selections are parsed by :mod:`.pages`; :mod:`.document` holds :class:`Document` and :class:`Page`.

A new format is its own module (how its pages are read, how its content is recognised) and one line in
:data:`~.formats.FORMATS`. Every problem a user can fix (a missing file, an encrypted or scanned PDF, a bad page
selection, ...) is raised as a one-line :class:`~snapkv_cli.errors.UserError` that names the fix. Nothing here
imports torch.
"""

from .document import PAGE_SEPARATOR, Document, Page
from .encoding import decode_document_bytes
from .formats import DOCUMENT_SUFFIXES, named_formats
from .html import html_to_text
from .pages import parse_page_ranges, parse_page_spec
from .reader import DocumentReader, load_document
from .source import DEFAULT_MAX_DOCUMENT_MB, MAX_DOCUMENT_MB_ENV, display_path, max_document_bytes, megabytes

__all__ = [
    "DEFAULT_MAX_DOCUMENT_MB",
    "DOCUMENT_SUFFIXES",
    "MAX_DOCUMENT_MB_ENV",
    "PAGE_SEPARATOR",
    "Document",
    "DocumentReader",
    "Page",
    "decode_document_bytes",
    "display_path",
    "html_to_text",
    "load_document",
    "max_document_bytes",
    "megabytes",
    "named_formats",
    "parse_page_ranges",
    "parse_page_spec",
]
