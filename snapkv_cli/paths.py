"""Paths a user typed: a name the file system cannot even look up is a user error, not an ``OSError``."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .errors import FileNameTooLong


def refuse_overlong(path: str | os.PathLike) -> None:
    """Raise :class:`FileNameTooLong` if the file system refuses to look ``path`` up because a name in it is too
    long (``ENAMETOOLONG``); ``Path.exists()`` and friends raise a bare ``OSError`` then."""
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            longest = max((len(os.fsencode(part)) for part in Path(path).parts), default=0)
            raise FileNameTooLong(os.fsencode(os.fspath(path)).decode("utf-8", "backslashreplace"), longest) \
                from None
