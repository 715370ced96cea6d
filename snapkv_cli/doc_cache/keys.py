"""What identifies a stored prefix: the model, the template, the prefix token ids and how it was prefilled.

:func:`prefix_key` is the whole key of one entry; the store names the entry's file by a keyed hash of it and
trusts the file only if its metadata equals it exactly.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

FORMAT_VERSION = 2  # 2: HMAC names and signatures, tensors checked against the config, the prefill chunk keyed


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def ids_digest(ids: list[int]) -> str:
    return _sha256(",".join(map(str, ids)))


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


def prefix_key(loaded, template, prefix_ids: list[int], window_size: int, attention_sums: bool,
               prefill_chunk: int | None = None) -> dict:
    """The full key of one prefix; its keyed hash names the file, and the file's metadata must equal it.

    ``prefill_chunk`` is part of it: a prefix prefilled in chunks differs from a one-pass prefill in the last bits
    (the matrices have other shapes), so each is its own entry; a chunk as long as the prefix is one pass.
    """
    chunk = prefill_chunk if prefill_chunk and prefill_chunk < len(prefix_ids) else None
    return {
        "format_version": FORMAT_VERSION,
        "model": model_key(loaded),
        "template": template_key(template),
        "prefix_tokens": len(prefix_ids),
        "prefix_ids_sha256": ids_digest(prefix_ids),
        "window_size": window_size,
        "attention_sums": attention_sums,
        "prefill_chunk": chunk,
    }


def key_text(key: dict) -> str:
    return json.dumps(key, sort_keys=True)

