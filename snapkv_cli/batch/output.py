"""Where a batch writes its lines: stdout, or a JSONL file that a rerun resumes.

:class:`AnswerFile` appends each line with one ``write`` of the whole line and its newline, flushed to the disk
(``fsync``) before the next answer starts, so a line is either all there or, after a kill in the middle of that
write, an unfinished tail with no newline. Opening the file again repairs that tail (an unfinished line is cut off,
a whole object missing only its newline gets it) and never touches a line that ended, then reads which
``(id, question)`` pairs already have an answer: a rerun skips those and only those. Error lines stay as a record;
their questions are asked again. An exclusive lock keeps two batches from appending to one file at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from typing import TextIO

from ..errors import OutputInUse, UserError


def line_key(line: dict) -> tuple:
    """What identifies a line's question in a batch: ``(id, question)``."""
    return (line.get("id"), line.get("question"))


def encode(line: dict) -> bytes:
    """A line as written: compact JSON (no newline inside) and its newline."""
    return (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")


class StreamOutput:
    """Lines to a text stream (stdout): nothing to resume from."""

    path = None
    repaired_bytes = 0

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdout
        self.answered: set[tuple] = set()

    def write(self, line: dict) -> None:
        self.stream.write(encode(line).decode("utf-8"))
        self.stream.flush()

    def close(self) -> None:
        pass


class AnswerFile:
    """A JSONL file of answers, appended line by line and resumable (see the module's docstring).

    answered: the ``(id, question)`` pairs that already have an answer line; earlier_errors: how many error lines
    it holds; repaired_bytes: the bytes of an unfinished last line that opening it cut off (0 if none).
    """

    def __init__(self, path: str, *, sync: bool = True):
        self.path, self.sync = path, sync
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except IsADirectoryError:
            raise UserError(f"the output {path} is a folder; give a file path") from None
        except OSError as error:
            raise UserError(f"cannot open the output {path}: {error.strerror or error}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise OutputInUse(path) from None
        try:
            self.answered, self.earlier_errors, self.repaired_bytes = self._resume()
        except BaseException:
            self.close()
            raise

    def _read(self) -> bytes:
        chunks, offset = [], 0
        while chunk := os.pread(self.fd, 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def _resume(self) -> tuple[set[tuple], int, int]:
        data = self._read()
        end = data.rfind(b"\n") + 1
        tail, repaired = data[end:], 0
        if tail.strip():
            if _parse(tail) is not None:  # a whole line that lost only its newline
                self._write_all(b"\n")
                end = len(data)
            else:  # a write that a kill cut short: it never became a line
                os.ftruncate(self.fd, end)
                repaired = len(tail)
        elif tail:
            os.ftruncate(self.fd, end)
        answered, errors = set(), 0
        for number, raw in enumerate(data[:end].splitlines(), start=1):
            if not raw.strip():
                continue
            line = _parse(raw)
            if line is None:
                raise UserError(f"{self.path} line {number} is not a JSON object, so it was not written by snapkv "
                                "batch; give another output file")
            if "error" in line:
                errors += 1
            elif "answer" in line:
                answered.add(line_key(line))
        return answered, errors, repaired

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        if self.sync:
            os.fsync(self.fd)

    def write(self, line: dict) -> None:
        """Append ``line`` and its newline, and flush them to the disk."""
        self._write_all(encode(line))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # releases the lock
            self.fd = -1


def _parse(raw: bytes) -> dict | None:
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None
