"""Any local ``.gguf`` file, converted once and cached, keyed by the file's content hash.

transformers dequantizes a GGUF on every load (61 s and 3.2 GB peak RSS for Gemma 3 270M here); the converted
directory loads in about a second. The cache entry is ``cache_root()/models/gguf-<first 16 hex digits of the
file's SHA-256>/`` with the full hash in its marker, so renaming or moving the file still hits it and any change
to its bytes makes a new entry. Hashing costs about 1 s per 250 MB; a small index remembers the hash of a path
whose size and modification time have not changed, so repeated runs skip even that.

No torch or transformers at import time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from snapkv_cli.models import conversion
from snapkv_cli.models.cache_dir import models_dir
from snapkv_cli.models.checksums import sha256_file

Progress = Callable[[str], None]

PREFIX = "gguf-"
INDEX_NAME = "gguf-hashes.json"


def converted_dir(sha256: str) -> Path:
    """Where the conversion of a GGUF with this content hash lives."""
    return models_dir() / f"{PREFIX}{sha256[:16]}"


def content_hash(path: Path, progress: Progress | None = None) -> str:
    """SHA-256 of ``path``, from the index when its size and modification time match what was hashed."""
    say = progress or (lambda _msg: None)
    path = Path(path).resolve()
    stat = path.stat()
    index = _read_index()
    known = index.get(str(path))
    if isinstance(known, dict) and known.get("size") == stat.st_size and known.get("mtime_ns") == stat.st_mtime_ns:
        sha = known.get("sha256")
        if isinstance(sha, str) and len(sha) == 64:
            return sha
    say(f"Hashing {path.name} ({stat.st_size / 1e6:.0f} MB)...")
    sha = sha256_file(path)
    index[str(path)] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha}
    _write_index(index)
    return sha


def ensure(path: Path, progress: Progress | None = None) -> Path:
    """The converted directory of the GGUF at ``path``, converting it on first use."""
    path = Path(path).resolve()
    sha = content_hash(path, progress)
    target = converted_dir(sha)

    def obtain(_work: Path, _say: Progress) -> Path:
        return path  # converted where it lies, never copied

    info = {"model": path.name, "source": str(path), "gguf_file": path.name}
    return conversion.build_once(target, sha, obtain, title=path.name, info=info, progress=progress,
                                 needed=f"about {4 * path.stat().st_size / 1e9 + 0.1:.1f} GB")


def cached_entries() -> list[dict[str, Any]]:
    """Converted local GGUFs in the cache: name, source, path, size (for ``snapkv models list``)."""
    entries = []
    root = models_dir()
    if not root.is_dir():
        return entries
    for directory in sorted(root.glob(f"{PREFIX}*")):
        marker = conversion.read_marker(directory)  # None for anything but a directory with a readable marker
        if marker is None or not conversion.is_complete(directory, str(marker.get("gguf_sha256"))):
            continue
        entries.append({"name": marker.get("model"), "source": marker.get("source"), "path": str(directory),
                        "gguf_sha256": marker.get("gguf_sha256")})
    return entries


def _index_path() -> Path:
    return models_dir() / INDEX_NAME


def _read_index() -> dict[str, Any]:
    try:
        data = json.loads(_index_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_index(index: dict[str, Any]) -> None:
    """Best effort (an unwritable cache only costs a re-hash next time); written atomically."""
    target = _index_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}")
        temporary.write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, target)
    except OSError:
        pass
