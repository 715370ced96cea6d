"""SHA-256 of files, computed in 1 MiB blocks, and the check against a pinned hash.

No torch or transformers here: ``snapkv models list`` imports the modules that use it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from snapkv_cli.errors import ChecksumMismatch, UserError

BLOCK_BYTES = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of the file's bytes."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str, what: str, hint: str) -> None:
    """Raise :class:`ChecksumMismatch` unless ``path`` hashes to ``expected``.

    ``what`` names the file in the message ("the wheel"), ``hint`` is the fix.
    """
    try:
        actual = sha256_file(path)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}; check the file and retry") from None
    if actual != expected:
        raise ChecksumMismatch(what, path, expected, actual, hint)
