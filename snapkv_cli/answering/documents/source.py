"""The bytes of a document's source, a regular file or stdin, read within the size limit.

Only regular files and stdin are read: a file is opened without blocking and a directory, a FIFO, a device or a
socket is refused before a byte of it is read. No more than the limit, plus one byte to tell that it is over, is
ever read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import typing
from pathlib import Path

from snapkv_cli.errors import DocumentTooLarge, FileNameTooLong, InvalidValue, NotARegularFile, UserError

MAX_DOCUMENT_MB_ENV = "SNAPKV_MAX_DOCUMENT_MB"
DEFAULT_MAX_DOCUMENT_MB = 256


def max_document_bytes() -> int:
    """The size limit for one document: ``$SNAPKV_MAX_DOCUMENT_MB`` megabytes, else :data:`DEFAULT_MAX_DOCUMENT_MB`."""
    value = os.environ.get(MAX_DOCUMENT_MB_ENV, "").strip()
    if not value:
        return DEFAULT_MAX_DOCUMENT_MB * 2**20
    try:
        megabytes = float(value)
    except ValueError:
        megabytes = -1.0
    if not 0 < megabytes < float("inf"):
        raise InvalidValue(MAX_DOCUMENT_MB_ENV, value, "a positive number of megabytes")
    return int(megabytes * 2**20)


def megabytes(limit_mb: float | None) -> int | None:
    """A size limit given in MB (``max_document_mb``) in bytes, for :func:`~.reader.load_document`'s ``max_bytes``;
    None stays None (the default limit, :func:`max_document_bytes`)."""
    return None if limit_mb is None else int(limit_mb * 2**20)


def display_path(path: str) -> str:
    """``path`` as text that can always be printed and stored: bytes that are not UTF-8 become ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_stdin(stdin: typing.TextIO | typing.BinaryIO | None, limit: int) -> bytes | str:
    """What ``stdin`` (default: ``sys.stdin``'s bytes) holds, at most ``limit``: bytes, or text from a text stream;
    a terminal is refused (nothing was piped in)."""
    stream = stdin if stdin is not None else sys.stdin.buffer
    with contextlib.suppress(AttributeError, ValueError, OSError):
        if stream.isatty():
            raise UserError(
                "no document on stdin: pipe one in (e.g. cat report.pdf | ...) or give a file path"
            )
    try:
        data = stream.read(limit + 1)
    except OSError as exc:
        reason = exc.strerror or exc
        raise UserError(f"cannot read stdin: {reason}; pipe a document in or give a path") from None
    if len(data) > limit:
        raise DocumentTooLarge("<stdin>", limit, limit, MAX_DOCUMENT_MB_ENV)
    return data


_FILE_TYPES = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(descriptor: int, source: str, limit: int) -> None:
    """Refuse (closing ``descriptor``) anything but a regular file within ``limit`` bytes."""
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise UserError(f"'{source}' is a directory: give the path of a document file inside it")
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _FILE_TYPES if test(info.st_mode)), "not a regular file")
            raise NotARegularFile(source, kind)
        if info.st_size > limit:
            raise DocumentTooLarge(source, info.st_size, limit, MAX_DOCUMENT_MB_ENV)
    except BaseException:
        os.close(descriptor)
        raise


def read_file(path: str, source: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``: opened without blocking, checked with ``fstat``, at most ``limit``."""
    # os.open makes its descriptors non-inheritable itself (O_CLOEXEC where there is one)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags)  # O_NONBLOCK: a FIFO without a writer cannot hang the open
    except FileNotFoundError:
        raise UserError(f"file not found: '{source}'; check the path and spelling") from None
    except PermissionError:
        raise UserError(
            f"cannot read '{source}': permission denied; check its permissions (e.g. chmod +r)"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            longest = max(len(os.fsencode(part)) for part in Path(path).parts)
            raise FileNameTooLong(source, longest) from None
        raise UserError(f"cannot read '{source}': {exc.strerror or exc}; check the path") from None
    _check_regular(descriptor, source, limit)
    with open(descriptor, "rb") as file:
        try:
            data = file.read(limit + 1)
        except OSError as exc:
            raise UserError(f"cannot read '{source}': {exc.strerror or exc}; check the file") from None
    if len(data) > limit:  # it grew while we read it
        raise DocumentTooLarge(source, len(data), limit, MAX_DOCUMENT_MB_ENV)
    return data
