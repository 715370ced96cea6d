"""Where snapkv keeps its downloaded and converted models.

Kept free of heavy imports (no torch, no transformers): the CLI imports it for
``snapkv models list`` and for error messages.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

CACHE_ENV = "SNAPKV_CACHE_DIR"


def cache_root() -> Path:
    """The snapkv cache directory (not created here).

    Precedence: ``$SNAPKV_CACHE_DIR``, then ``$XDG_CACHE_HOME/snapkv``, then
    ``~/.cache/snapkv``. Empty variables count as unset.
    """
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg:
        return Path(xdg).expanduser() / "snapkv"
    return Path.home() / ".cache" / "snapkv"


def models_dir() -> Path:
    """``cache_root()/models``: one subdirectory per converted model."""
    return cache_root() / "models"


def dir_size_bytes(path: Path) -> int:
    """Total size of the regular files under ``path`` (0 if it does not exist)."""
    total = 0
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).stat().st_size
    return total
