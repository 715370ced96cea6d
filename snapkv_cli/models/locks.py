"""A cross-process lock on one piece of the cache (a wheel's download, a model's conversion), via ``filelock``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from snapkv_cli.errors import CacheNotWritable


@contextlib.contextmanager
def exclusive(lock_path: Path, waiting: str, say: Callable[[str], None], needed: str | None = None,
              what: str = "cache") -> Iterator[None]:
    """Hold the lock at ``lock_path`` for the block; when another process holds it, ``say(waiting)`` and wait.

    A lock file that cannot be created is :class:`CacheNotWritable` (``needed``: the disk space to name; ``what``:
    the part of the cache, as the caller's other refusals name it).
    """
    lock = FileLock(str(lock_path))
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            say(waiting)
            lock.acquire()
    except OSError as exc:
        raise CacheNotWritable(Path(lock_path).parent, exc.strerror or str(exc), needed, what) from None
    try:
        yield
    finally:
        lock.release()
