"""Page selections such as ``"3-7,10"`` or ``"5-"``: their form checked alone, their pages against a document's."""

from __future__ import annotations

import re

from snapkv_cli.errors import UserError


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
