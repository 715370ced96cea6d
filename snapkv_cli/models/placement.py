"""Where, in what precision and how quantized a model is loaded, as a user names them (``--device``, ``--dtype``,
``--quantize``, ``--decode-weights``).

:func:`parse_device`, :func:`parse_dtype` and :func:`parse_quantize` check the names without torch, so that a typo
(or a missing optional library) is reported before torch is imported; the loader then resolves them on this machine
(:func:`snapkv_cli.models.loader.resolve_device`, :func:`~snapkv_cli.models.loader.choose_dtype`).
"""

from __future__ import annotations

import importlib.util

from snapkv_cli.errors import QuantizationUnavailable, UserError

# --dtype spellings -> torch's name of the dtype
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float16": "float16", "fp16": "float16"}

# --quantize values -> what they do (the option's help); each needs torchao (the ``int8`` extra)
QUANTIZATIONS = {"int8": "weight-only int8 for the decoder's Linear layers (torchao)"}

# --decode-weights values -> what they do (the option's help; snapkv_cli.generation.decode_path runs them)
DECODE_WEIGHTS = {
    "same": "the weights as loaded",
    "bfloat16": "bfloat16 copies of a float32 model's Linear weights for one-token decoding steps (a CPU); the "
                "prefill, attention and KV cache stay float32",
}


def parse_decode_weights(value: str | None) -> str:
    """``same`` (also for None and "") or ``bfloat16`` (also ``bf16``); any other value is a :class:`UserError`."""
    key = (value or "same").strip().lower()
    key = {"bf16": "bfloat16"}.get(key, key)
    if key not in DECODE_WEIGHTS:
        raise UserError(f"unknown decode weights '{value}'; use {' or '.join(DECODE_WEIGHTS)}")
    return key


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


def parse_quantize(quantize: str | None) -> str | None:
    """None (also for "" and ``none``) or the ``--quantize`` scheme (``int8``), checked to be known and its library
    to be installed (found without importing it): an unknown name is a :class:`UserError`, a missing library a
    :class:`QuantizationUnavailable`."""
    key = (quantize or "none").strip().lower()
    if key == "none":
        return None
    if key not in QUANTIZATIONS:
        raise UserError(f"unknown quantization '{quantize}'; use none or {', '.join(QUANTIZATIONS)}")
    if importlib.util.find_spec("torchao") is None:
        raise QuantizationUnavailable(key)
    return key
