"""A cache directory's secret: the key of the HMAC-SHA256 that names and signs its entries.

Plain SHA-256 names let anyone who can guess a document check whether it was cached (hash the key, look for the
file) and let anyone who can write a file forge an entry with a matching checksum. With a random 32-byte secret,
readable only by its owner (mode 0600), file names cannot be predicted and an entry's signature cannot be made
without the secret. The secret is created once, atomically: written to a temporary file, then hard-linked into
place, so two processes creating it at the same time end up sharing the one that landed first.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import tempfile
from pathlib import Path

SECRET_NAME = ".secret"
SECRET_BYTES = 32


class SecretUnavailable(Exception):
    """The secret cannot be read or created (permissions, a damaged file, a read-only directory)."""


def load_secret(directory: Path, *, create: bool) -> bytes | None:
    """The secret of ``directory`` (None if it has none and ``create`` is off); creates it when asked."""
    path = Path(directory) / SECRET_NAME
    try:
        return _read(path)
    except FileNotFoundError:
        if not create:
            return None
    except OSError as error:
        raise SecretUnavailable(f"cannot read {path}: {error.strerror or error}") from None
    try:
        Path(directory).mkdir(parents=True, exist_ok=True, mode=0o700)
        return _create(path)
    except OSError as error:
        raise SecretUnavailable(f"cannot create {path}: {error.strerror or error}") from None


def _read(path: Path) -> bytes:
    with open(path, "rb") as file:
        secret = file.read(SECRET_BYTES + 1)
    if len(secret) != SECRET_BYTES:
        raise SecretUnavailable(f"{path} is damaged ({len(secret)} bytes, not {SECRET_BYTES}); "
                                "remove it (every cached document is then rebuilt)")
    return secret


def _create(path: Path) -> bytes:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-secret-")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(secrets.token_bytes(SECRET_BYTES))
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path)  # fails if another process created it first: then theirs is used
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: create exclusively instead
            with contextlib.suppress(FileExistsError), open(path, "xb") as file:
                file.write(Path(temporary).read_bytes())
        return _read(path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def keyed_digest(secret: bytes, *parts: str) -> hmac.HMAC:
    """An HMAC-SHA256 of ``parts`` under ``secret`` (each part length-prefixed, so boundaries cannot shift)."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        data = part.encode("utf-8")
        mac.update(len(data).to_bytes(8, "little"))
        mac.update(data)
    return mac
