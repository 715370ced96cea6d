"""The on-disk cache of prefilled documents: a prompt prefix's full KV, so a later question skips the prefill.

One entry is one safetensors file under ``cache_root()/docs`` (or ``$SNAPKV_DOC_CACHE_DIR``), named by a hash of its
key: the model (name, source, config, revision, weight files, dtype, device type, attention implementation, library
versions), the template, the prefix token ids (which cover the document, the pages and any truncation), the window
and whether attention sums are kept, and :data:`FORMAT_VERSION`. It holds, per layer, the uncompressed keys and
values, the last ``window`` queries and their positions (so each question's observation window can reach back into
the prefix) and, for H2O, the attention sums; plus the prefix token ids themselves.

Tensors are stored in the model's own dtype, so a prefix loaded from disk is bit for bit the prefix a fresh prefill
builds. An entry is trusted only if its header parses, its metadata matches the expected key exactly, every tensor
has the expected name, dtype and shape, its token ids equal the prompt's, and a SHA-256 of all tensor bytes matches
the one written with it; anything else is reported, deleted and rebuilt. Files are written to a temporary name and
renamed into place (``os.replace``), so readers never see half a file. The directory is capped in size; the least
recently used entries (file modification time, refreshed on every use) are evicted first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FORMAT_NAME = "snapkv-doc-cache"
FORMAT_VERSION = 1
DOC_CACHE_DIR_ENV = "SNAPKV_DOC_CACHE_DIR"
DOC_CACHE_ENV = "SNAPKV_CACHE_DOCS"
DOC_CACHE_MB_ENV = "SNAPKV_DOC_CACHE_MB"
DEFAULT_CAP_MB = 2048
SUFFIX = ".safetensors"
_TEMP_PREFIX = ".tmp-"
_STALE_TEMP_S = 3600.0


def docs_dir() -> Path:
    """``$SNAPKV_DOC_CACHE_DIR``, else ``cache_root()/docs`` (not created here)."""
    explicit = os.environ.get(DOC_CACHE_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    from .models.cache_dir import cache_root

    return cache_root() / "docs"


def default_cap_mb() -> int:
    """``$SNAPKV_DOC_CACHE_MB`` if it is a whole number, else :data:`DEFAULT_CAP_MB`."""
    value = os.environ.get(DOC_CACHE_MB_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_CAP_MB


def _sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def ids_digest(ids: list[int]) -> str:
    return _sha256(",".join(map(str, ids)))


# --------------------------------------------------------------------------------------------- keys


def _weights_fingerprint(source: str) -> list:
    """Name, size and modification time of the weight files behind ``source`` (a re-converted model changes it)."""
    path = Path(source)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf", ".pt", ".pth"))
    else:
        return []  # a Hugging Face id: its revision is in the config's commit hash
    fingerprint = []
    for file in files:
        with contextlib.suppress(OSError):
            stat = file.stat()
            fingerprint.append([file.name, stat.st_size, stat.st_mtime_ns])
    return fingerprint


def model_key(loaded) -> dict:
    """What identifies the model's KV for a given prompt: weights, config, dtype, device type, implementation."""
    import torch
    import transformers

    config = loaded.model.config
    return {
        "name": loaded.name,
        "source": loaded.source,
        "config_sha256": _sha256(config.to_json_string(use_diff=False)),
        "revision": getattr(config, "_commit_hash", None),
        "weights": _weights_fingerprint(loaded.source),
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "device_type": loaded.device.type,
        "attn_implementation": getattr(config, "_attn_implementation", None),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def template_key(template) -> dict:
    return {"name": template.name, "sha256": _sha256(json.dumps([template.system, template.user]))}


def prefix_key(loaded, template, prefix_ids: list[int], window_size: int, attention_sums: bool) -> dict:
    """The full key of one prefix; its hash names the file, and the file's metadata must equal it."""
    return {
        "format_version": FORMAT_VERSION,
        "model": model_key(loaded),
        "template": template_key(template),
        "prefix_tokens": len(prefix_ids),
        "prefix_ids_sha256": ids_digest(prefix_ids),
        "window_size": window_size,
        "attention_sums": attention_sums,
    }


def key_digest(key: dict) -> str:
    return _sha256(json.dumps(key, sort_keys=True))[:40]


# --------------------------------------------------------------------------------------------- tensors


def _tensor_names(num_layers: int, attention_sums: bool) -> list[str]:
    names = ["prefix_ids"]
    for index in range(num_layers):
        names += [f"layers.{index}.{part}" for part in ("keys", "values", "window_queries", "window_positions")]
        if attention_sums:
            names.append(f"layers.{index}.accumulated_attention")
    return names


def _checksum(tensors: dict) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        digest.update(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()


def export_prefix(cache, prefix_ids: list[int]) -> dict:
    """The tensors that rebuild ``cache`` (an uncompressed prefix from ``build_prefix``), on the CPU.

    They are the cache's :meth:`~snapkv_cli.engine.SnapKVCache.prefix_state` plus the prefix token ids.
    """
    import torch

    try:
        state = cache.prefix_state()
    except ValueError as error:
        raise UnsupportedPrefix(str(error)) from None
    tensors = {"prefix_ids": torch.tensor(prefix_ids, dtype=torch.int64)}
    tensors.update({name: tensor.detach().to("cpu").contiguous() for name, tensor in state.items()})
    return tensors


def import_prefix(tensors: dict, model, window_size: int, attention_sums: bool):
    """A ``SnapKVCache`` prefix equivalent to the one ``build_prefix`` built, from :func:`export_prefix`'s tensors.

    The layers' tensors are taken out of ``tensors`` as they are copied in, so at most one extra layer is alive.
    """
    from .engine import SnapKVCache

    return SnapKVCache.from_prefix_state(tensors, model.config, window_size, accumulate_attention=attention_sums,
                                         device=model.device)


class UnsupportedPrefix(Exception):
    """This prefix cannot be stored (sliding-window layers, ...): the run goes on without the disk cache."""


class CorruptEntry(Exception):
    """A cache file that fails validation: it is deleted and rebuilt."""


def _validate(tensors: dict, metadata: dict, key: dict, prefix_ids: list[int], model) -> None:
    import torch

    if metadata.get("format") != FORMAT_NAME or metadata.get("format_version") != str(FORMAT_VERSION):
        raise CorruptEntry("not a snapkv document cache file of this version")
    try:
        stored_key = json.loads(metadata.get("key", ""))
    except json.JSONDecodeError:
        raise CorruptEntry("unreadable key in the metadata") from None
    if stored_key != key:
        raise CorruptEntry("metadata does not match this model, template or document")
    config = model.config.get_text_config()
    num_layers = config.num_hidden_layers
    attention_sums = key["attention_sums"]
    if sorted(tensors) != sorted(_tensor_names(num_layers, attention_sums)):
        raise CorruptEntry("unexpected tensor names")
    if tensors["prefix_ids"].tolist() != list(prefix_ids):
        raise CorruptEntry("stored token ids differ from the prompt's")
    length, window = len(prefix_ids), min(key["window_size"], len(prefix_ids))
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    dtype = model.dtype
    expected_positions = torch.arange(length - window, length)
    for index in range(num_layers):
        keys, values = tensors[f"layers.{index}.keys"], tensors[f"layers.{index}.values"]
        queries = tensors[f"layers.{index}.window_queries"]
        positions = tensors[f"layers.{index}.window_positions"]
        if keys.dim() != 4 or keys.shape[:3] != (1, kv_heads, length) or values.shape[:3] != keys.shape[:3]:
            raise CorruptEntry(f"layer {index}: keys/values of shape {tuple(keys.shape)}/{tuple(values.shape)}, "
                               f"expected (1, {kv_heads}, {length}, head_dim)")
        if keys.dtype != dtype or values.dtype != dtype or queries.dtype != dtype:
            raise CorruptEntry(f"layer {index}: dtype {keys.dtype}, expected {dtype}")
        if queries.dim() != 4 or queries.shape[0] != 1 or queries.shape[2] != window:
            raise CorruptEntry(f"layer {index}: window queries of shape {tuple(queries.shape)}")
        if not torch.equal(positions.cpu(), expected_positions):
            raise CorruptEntry(f"layer {index}: wrong window positions")
        if attention_sums:
            sums = tensors[f"layers.{index}.accumulated_attention"]
            if sums.dim() != 4 or sums.shape[:2] != (1, kv_heads) or sums.shape[-1] != length:
                raise CorruptEntry(f"layer {index}: attention sums of shape {tuple(sums.shape)}")
    if _checksum(tensors) != metadata.get("checksum"):
        raise CorruptEntry("checksum mismatch (the file changed after it was written)")


# --------------------------------------------------------------------------------------------- the cache


@dataclass
class Entry:
    """One cache file, as ``snapkv cache list`` shows it."""

    path: Path
    bytes: int
    last_used: float
    metadata: dict

    def describe(self) -> dict:
        key = {}
        with contextlib.suppress(json.JSONDecodeError, TypeError):
            key = json.loads(self.metadata.get("key", "{}"))
        return {
            "file": self.path.name,
            "bytes": self.bytes,
            "last_used": self.last_used,
            "created": float(self.metadata["created"]) if self.metadata.get("created") else None,
            "document": self.metadata.get("document"),
            "model": key.get("model", {}).get("name"),
            "dtype": key.get("model", {}).get("dtype"),
            "template": key.get("template", {}).get("name"),
            "prefix_tokens": key.get("prefix_tokens"),
            "window_size": key.get("window_size"),
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


class DocCache:
    """The directory of prefilled document prefixes, capped at ``max_bytes`` with least-recently-used eviction."""

    def __init__(self, directory: Path | str | None = None, max_bytes: int | None = None):
        self.directory = Path(directory) if directory is not None else docs_dir()
        self.max_bytes = default_cap_mb() * 1024 * 1024 if max_bytes is None else int(max_bytes)

    def path_for(self, key: dict) -> Path:
        return self.directory / f"{key_digest(key)}{SUFFIX}"

    # -- reading -------------------------------------------------------------------------------------------
    def load(self, key: dict, prefix_ids: list[int], model) -> Lookup:
        """The stored prefix for ``key`` if there is a valid one; a bad entry is deleted (status ``rebuilt``)."""
        path = self.path_for(key)
        started = time.perf_counter()
        try:
            tensors, metadata = _read(path)
        except FileNotFoundError:
            return Lookup("miss", path)
        except Exception as error:  # a truncated file or a bad header: never trusted
            self._discard(path)
            return Lookup("rebuilt", path, reason=f"unreadable file ({_short(error)})")
        try:
            _validate(tensors, metadata, key, prefix_ids, model)
        except CorruptEntry as error:
            self._discard(path)
            return Lookup("rebuilt", path, reason=str(error))
        cache = import_prefix(tensors, model, key["window_size"], key["attention_sums"])
        with contextlib.suppress(OSError):
            os.utime(path)  # last use, for the LRU order
        return Lookup("hit", path, cache=cache, seconds=time.perf_counter() - started)

    # -- writing -------------------------------------------------------------------------------------------
    def store(self, key: dict, prefix_ids: list[int], cache, *, document: str | None = None) -> tuple[bool, str | None, int]:
        """Write ``cache`` for ``key`` atomically, then evict down to the cap: (stored, reason if not, bytes)."""
        from safetensors.torch import save_file

        try:
            tensors = export_prefix(cache, prefix_ids)
        except UnsupportedPrefix as error:
            return False, str(error), 0
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        if size > self.max_bytes:
            return False, (f"the prefix needs {size / 2**20:.1f} MB, more than the cache cap of "
                           f"{self.max_bytes / 2**20:.0f} MB (raise the cache size)"), size
        metadata = {
            "format": FORMAT_NAME,
            "format_version": str(FORMAT_VERSION),
            "key": json.dumps(key, sort_keys=True),
            "checksum": _checksum(tensors),
            "created": repr(time.time()),
            "document": document or "",
        }
        path = self.path_for(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(dir=self.directory, prefix=_TEMP_PREFIX, suffix=SUFFIX)
            os.close(descriptor)
            try:
                save_file(tensors, temporary, metadata=metadata)
                os.replace(temporary, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary)
                raise
        except OSError as error:
            return False, f"could not write {path}: {_short(error)}", size
        self.evict(keep=path)
        return True, None, path.stat().st_size if path.exists() else size

    # -- housekeeping --------------------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        """Every cache file, least recently used first (unreadable ones too, with empty metadata)."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            if not path.name.endswith(SUFFIX) or path.name.startswith(_TEMP_PREFIX) or not path.is_file():
                continue
            try:
                stat = path.stat()
            except OSError:
                continue
            found.append(Entry(path, stat.st_size, stat.st_mtime, _read_metadata(path)))
        return sorted(found, key=lambda entry: entry.last_used)

    def total_bytes(self) -> int:
        return sum(entry.bytes for entry in self.entries())

    def evict(self, keep: Path | None = None) -> list[Entry]:
        """Remove least recently used entries until the total fits the cap; ``keep`` goes last."""
        self._remove_stale_temporaries()
        entries = self.entries()
        total = sum(entry.bytes for entry in entries)
        removed = []
        for entry in sorted(entries, key=lambda e: (e.path == keep, e.last_used)):
            if total <= self.max_bytes:
                break
            self._discard(entry.path)
            total -= entry.bytes
            removed.append(entry)
        return removed

    def clear(self, older_than_s: float | None = None) -> list[Entry]:
        """Remove every entry, or those not used for ``older_than_s`` seconds."""
        now = time.time()
        removed = [entry for entry in self.entries()
                   if older_than_s is None or now - entry.last_used > older_than_s]
        for entry in removed:
            self._discard(entry.path)
        if older_than_s is None:
            self._remove_stale_temporaries(max_age_s=0)
        return removed

    def _remove_stale_temporaries(self, max_age_s: float = _STALE_TEMP_S) -> None:
        if not self.directory.is_dir():
            return
        now = time.time()
        for path in self.directory.glob(f"{_TEMP_PREFIX}*"):
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > max_age_s:
                    path.unlink()

    @staticmethod
    def _discard(path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _read(path: Path) -> tuple[dict, dict]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as file:
        metadata = file.metadata() or {}
        tensors = {name: file.get_tensor(name) for name in file.keys()}
    return tensors, metadata


def _read_metadata(path: Path) -> dict:
    """The header's metadata only (no tensor data is read); {} for an unreadable file."""
    try:
        with open(path, "rb") as file:
            size = int.from_bytes(file.read(8), "little")
            if not 0 < size <= 100 * 2**20:
                return {}
            header = json.loads(file.read(size))
        return header.get("__metadata__") or {}
    except (OSError, ValueError):
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
        from .errors import InvalidValue

        raise InvalidValue("older_than", text, "a duration such as 30m, 12h, 7d or 2w")
    return seconds
