"""HTML into plain text: the visible text of a page, with line breaks at block elements."""

from __future__ import annotations

import re
from html.parser import HTMLParser


def looks_like_html(text: str) -> bool:
    """Whether ``text`` starts as an HTML page does (for stdin and file names that do not say)."""
    head = text.lstrip().lower()
    return head.startswith("<!doctype html") or head.startswith("<html")


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

