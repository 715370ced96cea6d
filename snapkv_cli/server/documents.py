"""The uploaded documents: each file in the server's private directory, read once, removed with its document.

The directory is made for this server alone (mode 0700) and removed when it stops. A document's file is named by its
id (and the upload's file name ending, which decides how it is read, as it does for ``ask``); the name the client
gave is only shown, never used as a path.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..answering.documents import Document

_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


def display_name(name: str | None) -> str:
    """The file name a client gave, as it is shown: its last part, printable, at most 200 characters."""
    name = _UNPRINTABLE.sub("", (name or "").replace("\\", "/").rsplit("/", 1)[-1]).strip()
    return name[:200] or "document"


@dataclass(frozen=True)
class Stored:
    """An uploaded document: its id, the name it was given, what was read of it, its file and its size."""

    id: str
    name: str
    document: Document
    path: Path
    bytes: int
    created: float

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "kind": self.document.kind, "pages": len(self.document.pages),
                "characters": len(self.document.text), "bytes": self.bytes, "created": int(self.created)}


class DocumentStore:
    """The uploaded documents, in a private directory of their own."""

    def __init__(self):
        self.directory = Path(tempfile.mkdtemp(prefix="snapkv-serve-"))  # mode 0700
        self.documents: dict[str, Stored] = {}

    def new_file(self, name: str) -> tuple[str, Path]:
        """A fresh id and the path its upload is written to (the name's ending kept)."""
        identifier = secrets.token_hex(8)
        match = _SUFFIX.fullmatch(Path(name).suffix)
        return identifier, self.directory / (identifier + (match.group(0).lower() if match else ""))

    def add(self, identifier: str, name: str, path: Path, read: Callable[[str], Document]) -> Stored:
        """Read the uploaded file at ``path`` with ``read`` (the run's reader: its pages and size limit) and keep it;
        the file is removed if it cannot be read."""
        try:
            document = replace(read(str(path)), source=name)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        stored = Stored(identifier, name, document, path, path.stat().st_size, time.time())
        self.documents[identifier] = stored
        return stored

    def get(self, identifier: str) -> Stored | None:
        return self.documents.get(identifier)

    def remove(self, identifier: str) -> bool:
        stored = self.documents.pop(identifier, None)
        if stored is None:
            return False
        stored.path.unlink(missing_ok=True)
        return True

    def listing(self) -> list[dict]:
        return [stored.to_json() for stored in sorted(self.documents.values(), key=lambda stored: stored.created)]

    def close(self) -> None:
        """Remove every document and the directory."""
        self.documents.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


def private_file(path: Path):
    """Open ``path`` for writing, readable by this user only."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")
