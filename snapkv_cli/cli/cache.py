"""``snapkv cache list|clear``: the on-disk cache of prefilled documents (``--cache-docs``)."""

from __future__ import annotations

import json
import sys
import time
from typing import Optional

import typer

from .app import cache_app
from .errors import fail_cleanly


@cache_app.command("list")
@fail_cleanly
def cache_list(as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout.")) -> None:
    """Show the cached documents: size, last use, model, prompt tokens, document."""
    from ..doc_cache import DocCache

    render_cache_list(DocCache(), as_json=as_json)


@cache_app.command("clear")
@fail_cleanly
def cache_clear(
    older_than: Optional[str] = typer.Option(None, "--older-than",
                                             help="Only entries unused for this long: 30m, 12h, 7d, 2w."),
) -> None:
    """Remove cached documents (all, or those not used for --older-than)."""
    from ..doc_cache import DocCache, parse_age
    from ..views.units import human_bytes

    age = parse_age(older_than) if older_than is not None else None
    removed = DocCache().clear(older_than_s=age)
    typer.echo(f"removed {len(removed)} cached document(s), {human_bytes(sum(e.bytes for e in removed))}")


def render_cache_list(doc_cache, *, as_json: bool, now: float | None = None) -> None:
    """One line per entry, most recently used first, then the total (or one JSON object)."""
    from ..views.units import human_bytes

    entries = [entry.describe() for entry in reversed(doc_cache.entries())]
    total = sum(entry["bytes"] for entry in entries)
    if as_json:
        sys.stdout.write(json.dumps({"directory": str(doc_cache.directory), "cap_bytes": doc_cache.max_bytes,
                                     "total_bytes": total, "entries": entries}) + "\n")
        return
    now = time.time() if now is None else now
    rows = [("LAST USED", "SIZE", "TOKENS", "MODEL", "DTYPE", "TEMPLATE", "DOCUMENT")]
    for entry in entries:
        rows.append((_ago(now - entry["last_used"]), human_bytes(entry["bytes"]),
                     str(entry["prefix_tokens"] if entry["prefix_tokens"] is not None else "?"),
                     entry["model"] or "(unreadable)", entry["dtype"] or "?", entry["template"] or "?",
                     entry["document"] or "?"))
    if entries:
        widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
        for row in rows:
            sys.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] + "\n")
    sys.stdout.write(f"{len(entries)} cached document(s), {human_bytes(total)} of {human_bytes(doc_cache.max_bytes)} "
                     f"in {doc_cache.directory}\n")


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"
