"""The on-disk cache of prefilled documents: a prompt prefix's full KV, so a later question skips the prefill.

One entry is one safetensors file under ``cache_root()/docs`` (or ``$SNAPKV_DOC_CACHE_DIR``), named by a keyed hash
(HMAC-SHA256 under the directory's secret, :mod:`.secret`) of its key: the model (name, source,
config, revision, weight files, dtype, device type, attention implementation, library versions), the template, the
prefix token ids (which cover the document, the pages and any truncation), the window, whether attention sums are
kept, the prefill chunk size, and :data:`FORMAT_VERSION`. It holds the prefix's state
(:class:`~snapkv_cli.engine.prefix_state.PrefixState`: per layer, the uncompressed keys and values, the last
``window`` queries and their positions, so each question's observation window can reach back into the prefix, and,
for H2O, the attention sums) plus the prefix token ids themselves (:data:`PREFIX_IDS`).

Tensors are stored in the model's own dtype, so a prefix loaded from disk is bit for bit the prefix a fresh prefill
builds. An entry is read through one open file (:mod:`.tensor_file`) and trusted only if its header parses, its
metadata matches the expected key (:mod:`.keys`) exactly, every tensor has the name, shape and dtype the model's
config implies (:meth:`PrefixState.layout <snapkv_cli.engine.prefix_state.PrefixState.layout>`, and the token ids),
its token ids equal the prompt's, and an HMAC of the key and all tensor bytes matches the one written with it;
anything else is reported and rebuilt, and the file is deleted only if it is still the very file that failed. Files
are written to a temporary name and renamed into place (``os.replace``), so readers never see half a file. The
directory is capped in size; the least recently used entries (file modification time, refreshed on every use) are
evicted first. Renames into place, evictions and deletions of bad entries take the directory's lock (``flock``), so
no process deletes a file another has just written.

The cache is an optimisation: :meth:`DocCache.load` and :meth:`DocCache.store` never raise; whatever goes wrong
(a damaged file, a full disk, a read-only directory) becomes a miss or "not stored", with the reason.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..engine.prefix_state import PrefixLayoutMismatch, PrefixState, check_layout, check_window_positions
from .keys import FORMAT_VERSION, key_text
from .secret import SecretUnavailable, keyed_digest, load_secret
from .tensor_file import BadTensorFile, read_metadata, read_tensors

FORMAT_NAME = "snapkv-doc-cache"
DOC_CACHE_DIR_ENV = "SNAPKV_DOC_CACHE_DIR"
DOC_CACHE_ENV = "SNAPKV_CACHE_DOCS"
DOC_CACHE_MB_ENV = "SNAPKV_DOC_CACHE_MB"
DEFAULT_CAP_MB = 2048
SUFFIX = ".safetensors"
_TEMP_PREFIX = ".tmp-"
_LOCK_NAME = ".lock"
_STALE_TEMP_S = 3600.0
PREFIX_IDS = "prefix_ids"  # the tensor of the prefix's token ids, stored beside its state's tensors


def docs_dir() -> Path:
    """``$SNAPKV_DOC_CACHE_DIR``, else ``cache_root()/docs`` (not created here)."""
    explicit = os.environ.get(DOC_CACHE_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    from ..models.cache_dir import cache_root

    return cache_root() / "docs"


def default_cap_mb() -> int:
    """``$SNAPKV_DOC_CACHE_MB`` if it is a whole number, else :data:`DEFAULT_CAP_MB`."""
    value = os.environ.get(DOC_CACHE_MB_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_CAP_MB


# --------------------------------------------------------------------------------------------- tensors


def _signature(secret: bytes, key: str, tensors: dict) -> str:
    """HMAC-SHA256 under ``secret`` of the key text and every tensor's name, dtype, shape and bytes, in name order."""
    import torch

    mac = keyed_digest(secret, FORMAT_NAME, key)
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        mac.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        mac.update(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
    return mac.hexdigest()


def _entry_tensors(state: PrefixState, prefix_ids: list[int]) -> dict:
    """What an entry's file holds: the prefix's token ids and its ``state``'s tensors, on the CPU."""
    import torch

    tensors = {PREFIX_IDS: torch.tensor(prefix_ids, dtype=torch.int64)}
    tensors.update({name: tensor.detach().to("cpu").contiguous() for name, tensor in state.tensors().items()})
    return tensors


class CorruptEntry(Exception):
    """A cache file that fails validation: it is deleted and rebuilt."""


def _validate(tensors: dict, metadata: dict, key: dict, prefix_ids: list[int], model, secret: bytes) -> None:
    """Raise :class:`CorruptEntry` (or, for tensors this model's prefix cannot have, ``PrefixLayoutMismatch``) unless
    the entry is exactly the prefix ``key`` names, for ``model``."""
    import torch

    if metadata.get("format") != FORMAT_NAME or metadata.get("format_version") != str(FORMAT_VERSION):
        raise CorruptEntry("not a snapkv document cache file of this version")
    try:
        stored_key = json.loads(metadata.get("key", ""))
    except (json.JSONDecodeError, RecursionError):
        raise CorruptEntry("unreadable key in the metadata") from None
    if stored_key != key:
        raise CorruptEntry("metadata does not match this model, template or document")
    length = len(prefix_ids)
    check_layout(tensors, {PREFIX_IDS: ((length,), torch.int64), **PrefixState.layout(
        model.config, model.dtype, length, key["window_size"], key["attention_sums"])})
    if tensors[PREFIX_IDS].tolist() != list(prefix_ids):
        raise CorruptEntry("stored token ids differ from the prompt's")
    check_window_positions(tensors, length, key["window_size"])
    if not _same_digest(_signature(secret, metadata["key"], tensors), metadata.get("checksum", "")):
        raise CorruptEntry("checksum mismatch (the file changed after it was written, or another key signed it)")


def _same_digest(expected: str, given: str) -> bool:
    import hmac

    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def _printable(text) -> str | None:
    """``text`` if it is a string, made safe to print and store (lone surrogates and the like escaped)."""
    if not isinstance(text, str):
        return None
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# --------------------------------------------------------------------------------------------- the cache


@dataclass
class Entry:
    """One cache file, as ``snapkv cache list`` shows it."""

    path: Path
    bytes: int
    last_used: float
    metadata: dict

    def describe(self) -> dict:
        """What ``snapkv cache list`` shows; a file with junk metadata shows as unreadable, never fails."""
        key = {}
        with contextlib.suppress(ValueError, RecursionError):  # the metadata is a map of strings (read_metadata)
            key = json.loads(self.metadata.get("key", "{}"))
        key = key if isinstance(key, dict) else {}
        model = key.get("model") if isinstance(key.get("model"), dict) else {}
        template = key.get("template") if isinstance(key.get("template"), dict) else {}
        created = None
        with contextlib.suppress(ValueError, TypeError):
            created = float(self.metadata.get("created"))
        counts = {name: key.get(name) if type(key.get(name)) is int else None
                  for name in ("prefix_tokens", "window_size")}
        return {
            "file": os.fsencode(self.path.name).decode("utf-8", "backslashreplace"),
            "bytes": self.bytes,
            "last_used": self.last_used,
            "created": created if created is not None and math.isfinite(created) else None,
            "document": _printable(self.metadata.get("document")),
            "model": _printable(model.get("name")),
            "dtype": _printable(model.get("dtype")),
            "template": _printable(template.get("name")),
            **counts,
            "valid_header": bool(key),
        }


@dataclass
class Lookup:
    """What the cache did for one prefix: status is hit, miss (to be built and stored), or rebuilt (bad entry)."""

    status: str
    path: Path
    reason: str | None = None
    cache: object | None = None
    seconds: float = 0.0
    bytes: int | None = None  # the size of the file that was loaded (a hit)


class DocCache:
    """The directory of prefilled document prefixes, capped at ``max_bytes`` with least-recently-used eviction."""

    def __init__(self, directory: Path | str | None = None, max_bytes: int | None = None):
        self.directory = Path(directory) if directory is not None else docs_dir()
        self.max_bytes = default_cap_mb() * 1024 * 1024 if max_bytes is None else int(max_bytes)

    def path_for(self, key: dict, secret: bytes | None = None) -> Path:
        """The file of ``key``: named by an HMAC of the key under this directory's secret (created if missing)."""
        secret = secret if secret is not None else load_secret(self.directory, create=True)
        return self.directory / f"{keyed_digest(secret, key_text(key)).hexdigest()[:40]}{SUFFIX}"

    def signature(self, tensors: dict, metadata: dict) -> str:
        """The signature an entry with ``tensors`` and ``metadata`` (its ``key``) must carry in this directory."""
        return _signature(load_secret(self.directory, create=True), metadata["key"], tensors)

    # -- reading -------------------------------------------------------------------------------------------
    def load(self, key: dict, prefix_ids: list[int], model) -> Lookup:
        """The stored prefix for ``key`` if there is a valid one (status ``hit``); ``miss`` if there is none;
        ``rebuilt`` (with the reason) if there is one that cannot be used. Never raises."""
        started = time.perf_counter()
        try:
            secret = load_secret(self.directory, create=True)
        except SecretUnavailable as error:
            return Lookup("miss", self.directory, reason=f"the cache cannot be used: {error}")
        path = self.path_for(key, secret)
        try:
            file = open(path, "rb")  # noqa: SIM115 - opened here, closed by the `with file:` below
        except FileNotFoundError:
            return Lookup("miss", path)
        except OSError as error:  # not validated as bad: left alone
            return Lookup("rebuilt", path, reason=f"could not open it ({_short(error)})")
        with file:
            try:
                info = os.fstat(file.fileno())
            except OSError as error:
                return Lookup("rebuilt", path, reason=f"could not read it ({_short(error)})")
            try:
                tensors, metadata = read_tensors(file)
            except BadTensorFile as error:
                return self._rejected(path, info, f"unreadable file ({_short(error)})")
            except Exception as error:
                return Lookup("rebuilt", path, reason=f"could not read it ({_short(error)})")
            try:
                _validate(tensors, metadata, key, prefix_ids, model, secret)
            except (CorruptEntry, PrefixLayoutMismatch) as error:
                return self._rejected(path, info, str(error))
            except Exception as error:
                return Lookup("rebuilt", path, reason=f"could not check it ({_short(error)})")
            with contextlib.suppress(OSError, NotImplementedError):
                os.utime(file.fileno())  # last use, for the LRU order: this very file, whatever the name holds now
        try:
            from ..engine import SnapKVCache

            state = PrefixState.from_tensors(tensors, model.config, key["attention_sums"])
            cache = SnapKVCache.from_prefix_state(state, model.config, key["window_size"], device=model.device)
        except Exception as error:
            return Lookup("rebuilt", path, reason=f"could not load it ({_short(error)})")
        return Lookup("hit", path, cache=cache, seconds=time.perf_counter() - started, bytes=info.st_size)

    def _rejected(self, path: Path, info: os.stat_result, reason: str) -> Lookup:
        """A file validated as bad: delete it if it is still the one we read; the lookup says rebuilt."""
        if not self._discard(path, info):
            with contextlib.suppress(OSError):
                if _same_file(os.stat(path), info):
                    reason += " (it could not be removed)"
        return Lookup("rebuilt", path, reason=reason)

    # -- writing -------------------------------------------------------------------------------------------
    def store(
        self, key: dict, prefix_ids: list[int], cache, *, document: str | None = None
    ) -> tuple[bool, str | None, int]:
        """Write ``cache`` for ``key`` atomically, then evict down to the cap: (stored, reason if not, bytes).

        Never raises: a full disk, a read-only directory or anything else is "not stored" with the reason.
        """
        try:
            try:
                state = cache.prefix_state()
            except ValueError as error:  # a compressed cache, sliding-window layers: no prefix to store
                return False, str(error), 0
            tensors = _entry_tensors(state, prefix_ids)
        except Exception as error:
            return False, f"could not export the prefix ({_short(error)})", 0
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        if size > self.max_bytes:
            return False, self._too_big(size), size
        path = self.directory
        try:
            secret = load_secret(self.directory, create=True)
            path = self.path_for(key, secret)
            text = key_text(key)
            metadata = {
                "format": FORMAT_NAME,
                "format_version": str(FORMAT_VERSION),
                "key": text,
                "checksum": _signature(secret, text, tensors),
                "created": repr(time.time()),
                "document": _printable(document) or "",
            }
            return self._write(path, tensors, metadata, size)
        except Exception as error:
            return False, f"could not write {path}: {_short(error)}", size

    def _write(self, path: Path, tensors: dict, metadata: dict, size: int) -> tuple[bool, str | None, int]:
        from safetensors.torch import save_file

        descriptor, temporary = tempfile.mkstemp(dir=self.directory, prefix=_TEMP_PREFIX, suffix=SUFFIX)
        os.close(descriptor)
        try:
            save_file(tensors, temporary, metadata=metadata)
            written = os.stat(temporary)
            if written.st_size > self.max_bytes:
                return False, self._too_big(written.st_size), written.st_size
            with self._locked():
                os.replace(temporary, path)
                self._evict_locked(keep=path)
                try:
                    still_there = _same_file(os.stat(path), written)
                except FileNotFoundError:
                    still_there = False
            if not still_there:  # another process replaced or evicted it while we held no lock: say so
                return False, "another process replaced or evicted the entry as it was written", written.st_size
            return True, None, written.st_size
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)

    def _too_big(self, size: int) -> str:
        return (f"the prefix needs {size / 2**20:.1f} MB, more than the cache cap of {self.max_bytes / 2**20:.0f} MB "
                "(raise the cache size)")

    # -- housekeeping --------------------------------------------------------------------------------------
    def entries(self, *, with_metadata: bool = True) -> list[Entry]:
        """Every cache file, least recently used first (unreadable or junk ones too, with empty metadata)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        found = []
        for name in names:
            if not name.endswith(SUFFIX) or name.startswith(_TEMP_PREFIX):
                continue
            path = self.directory / name
            try:
                info = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.append(Entry(path, info.st_size, info.st_mtime, _read_metadata(path) if with_metadata else {}))
        return sorted(found, key=lambda entry: entry.last_used)

    def total_bytes(self) -> int:
        return sum(entry.bytes for entry in self.entries(with_metadata=False))

    def evict(self, keep: Path | None = None) -> list[Entry]:
        """Remove least recently used entries until the total fits the cap; ``keep`` is never removed."""
        with self._locked():
            return self._evict_locked(keep)

    def _evict_locked(self, keep: Path | None) -> list[Entry]:
        self._remove_stale_temporaries()
        entries = self.entries(with_metadata=False)
        total = sum(entry.bytes for entry in entries)
        removed = []
        for entry in entries:
            if total <= self.max_bytes:
                break
            if entry.path == keep:
                continue
            with contextlib.suppress(OSError):
                entry.path.unlink()
                total -= entry.bytes
                removed.append(entry)
        return removed

    def clear(self, older_than_s: float | None = None) -> list[Entry]:
        """Remove every entry, or those not used for ``older_than_s`` seconds; junk files go too, and a file that
        cannot be removed is skipped (not returned)."""
        now = time.time()
        removed = []
        with self._locked():
            for entry in self.entries():
                if older_than_s is not None and now - entry.last_used <= older_than_s:
                    continue
                with contextlib.suppress(OSError):
                    entry.path.unlink()
                    removed.append(entry)
            if older_than_s is None:
                self._remove_stale_temporaries(max_age_s=0)
        return removed

    def _remove_stale_temporaries(self, max_age_s: float = _STALE_TEMP_S) -> None:
        try:
            names = [name for name in os.listdir(self.directory) if name.startswith(_TEMP_PREFIX)]
        except OSError:
            return
        now = time.time()
        for name in names:
            path = self.directory / name
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > max_age_s:
                    path.unlink()

    def _discard(self, path: Path, info: os.stat_result) -> bool:
        """Delete ``path`` if it is still the file ``info`` describes (checked under the lock); True if deleted."""
        with self._locked():
            try:
                if not _same_file(os.stat(path), info):
                    return False
                path.unlink()
            except OSError:
                return False
        return True

    @contextlib.contextmanager
    def _locked(self):
        """The directory's exclusive lock (``flock`` on ``.lock``); without one (read-only, no flock), unlocked."""
        handle = None
        with contextlib.suppress(OSError, ImportError):
            import fcntl

            handle = open(self.directory / _LOCK_NAME, "a+b")  # noqa: SIM115 - held until the finally below
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if handle is not None:
                handle.close()  # closing releases the lock


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """The same file (device and inode): the caller holds it open or holds the lock, so the inode is not reused."""
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _read(path: Path) -> tuple[dict, dict]:
    """``(tensors, metadata)`` of the cache file ``path``, read through one open file."""
    with open(path, "rb") as file:
        return read_tensors(file)


def _read_metadata(path: Path) -> dict:
    """The header's metadata only (no tensor data is read); {} for an unreadable or junk file."""
    try:
        with open(path, "rb") as file:
            return read_metadata(file)
    except (OSError, BadTensorFile, MemoryError):
        return {}


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def parse_age(text: str) -> float:
    """'30m', '12h', '7d', '2w' or plain seconds -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    value = text.strip().lower()
    unit = value[-1:] if value[-1:] in units else "s"
    number = value[:-1] if value[-1:] in units else value
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        seconds = -1
    if not seconds >= 0:
        from ..errors import InvalidValue

        raise InvalidValue("older_than", text, "a duration such as 30m, 12h, 7d or 2w")
    return seconds
