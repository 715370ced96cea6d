"""Where and in what precision a model is loaded, as a user names them (``--device``, ``--dtype``).

:func:`parse_device` and :func:`parse_dtype` check the names without torch, so that a typo is reported before torch
is imported; the loader then resolves them on this machine (:func:`snapkv_cli.models.loader.resolve_device`,
:func:`~snapkv_cli.models.loader.resolve_dtype`).
"""

from __future__ import annotations

from snapkv_cli.errors import UserError

# --dtype spellings -> torch's name of the dtype
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float16": "float16", "fp16": "float16"}


def parse_device(device: str | None) -> tuple[str, int | None]:
    """``(kind, index)`` of a ``--device`` value: kind ``auto`` (also for None and ""), ``cpu`` or ``cuda``, index
    the N of ``cuda:N`` (else None); any other value is a :class:`UserError`."""
    key = (device or "auto").strip().lower()
    if key in ("auto", "cpu", "cuda"):
        return key, None
    suffix = key.removeprefix("cuda:")
    if suffix != key and suffix.isascii() and suffix.isdigit():
        return "cuda", int(suffix)
    raise UserError(f"unknown device '{device}'; use auto, cpu, cuda or cuda:N")


def parse_dtype(dtype: str | None) -> str:
    """``auto`` (also for None and "") or torch's name of the dtype a ``--dtype`` value names; any other value is a
    :class:`UserError`."""
    key = (dtype or "auto").strip().lower()
    if key == "auto" or key in DTYPE_NAMES:
        return DTYPE_NAMES.get(key, key)
    raise UserError(f"unknown dtype '{dtype}'; use auto, float32 (fp32), bfloat16 (bf16) or float16 (fp16)")
