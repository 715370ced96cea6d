"""Write a file all at once: into a temporary file beside it, then ``os.replace``; nothing is left on error.

Nor on SIGTERM or SIGHUP (a closed terminal, ``kill``): while a file is being written, those signals (when they
would kill the process anyway) become an exception, the temporary file is removed, and the signal is then raised
again with its default action, so the process still ends as the signal says.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import UserError
from .paths import refuse_overlong


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early, with the fix, when ``path`` cannot be written (before the model runs)."""
    path = Path(path)
    refuse_overlong(path)
    parent = path.parent  # "." for a bare file name
    if path.is_dir():
        raise UserError(f"cannot write {path}: it is a directory; give a file name")
    if not parent.is_dir():
        raise UserError(f"cannot write {path}: the directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise UserError(f"cannot write {path}: the directory {parent} is not writable")
    return path


class Terminated(BaseException):
    """A termination signal arrived while an atomic write was open (``signum`` says which)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"terminated by signal {signum}")


_TERMINATIONS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def terminations_raise() -> Iterator[None]:
    """Inside, SIGTERM and SIGHUP raise :class:`Terminated` instead of killing the process at once.

    Only signals left at their default action are taken over (an ignored SIGHUP, as under ``nohup``, stays
    ignored; a handler someone installed stays theirs), and only in the main thread (where Python runs handlers).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        raise Terminated(signum)

    previous = {}
    try:
        for signum in _TERMINATIONS:
            if signal.getsignal(signum) == signal.SIG_DFL:
                previous[signum] = signal.signal(signum, handler)
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """Yield a file open for writing; on success it becomes ``path``, on any error it is removed.

    The temporary file sits in the same directory (so the rename is atomic) and ``path`` ends with the permissions
    a newly created file would have. A SIGTERM or SIGHUP meanwhile removes the temporary file, then ends the process
    by that signal.
    """
    path = check_writable(path)
    terminated = None
    with terminations_raise():
        temporary = None
        try:
            descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(descriptor, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as file:
                yield file
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
            os.replace(temporary, path)
        except BaseException as error:
            if temporary is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary)
            if not isinstance(error, Terminated):
                raise
            terminated = error
    if terminated is not None:
        signal.raise_signal(terminated.signum)  # the default action again: the process ends by this signal
        raise terminated
