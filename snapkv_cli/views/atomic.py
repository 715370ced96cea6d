"""Write a file all at once: into a temporary file beside it, then ``os.replace``; nothing is left on error."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..errors import UserError


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early, with the fix, when ``path`` cannot be written (before the model runs)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UserError(f"cannot write {path}: it is a directory; give a file name")
    if not parent.is_dir():
        raise UserError(f"cannot write {path}: the directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise UserError(f"cannot write {path}: the directory {parent} is not writable")
    return path


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """Yield a file open for writing; on success it becomes ``path``, on any error it is removed.

    The temporary file sits in the same directory (so the rename is atomic) and ``path`` ends with the permissions
    a newly created file would have.
    """
    path = check_writable(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as file:
            yield file
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
