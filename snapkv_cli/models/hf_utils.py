"""Small helpers around transformers shared by the loader and the default-model converter.

Importing this module is cheap: transformers is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator
from typing import Any


def set_hf_env() -> None:
    """Environment defaults for Hugging Face libraries (a user's own setting wins).

    Best called before ``huggingface_hub`` is first imported, which reads some of
    these at import time.
    """
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def quiet_transformers() -> None:
    """Silence transformers' warnings and progress bars (errors still raise), and torchao's: where it is installed
    (the ``int8`` extra), transformers imports it with every model, and it warns of optional GPU kernels it cannot load
    on a CPU-only torch and of enums torch now registers itself, nothing a user can act on."""
    set_hf_env()
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


@contextlib.contextmanager
def no_gguf_progress_bar() -> Iterator[None]:
    """Hide the "Converting and de-quantizing GGUF tensors" bar.

    transformers draws it with ``tqdm.auto.tqdm`` directly, so ``disable_progress_bar``
    does not reach it; swap the module's name for a disabled tqdm while loading.
    """
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except Exception:  # pragma: no cover - transformers without GGUF support
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)
    if original is None:  # pragma: no cover - layout changed upstream
        yield
        return
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def strip_gguf_quantizer(model: Any) -> None:
    """Mark a GGUF-loaded model as a plain (already dequantized) model.

    transformers dequantizes GGUF weights on load but keeps ``config.quantization_config``
    and ``model.hf_quantizer``, which make ``save_pretrained`` refuse ("quantized with
    gguf and is not serializable") and can block ``.to()``; the weights themselves are
    ordinary tensors.
    """
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "quantization_config"):
        try:
            del config.quantization_config
        except AttributeError:  # pragma: no cover - attribute defined on the class
            config.quantization_config = None
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None


def short_reason(exc: BaseException, limit: int = 200) -> str:
    """First non-empty line of an exception message, shortened, for one-line errors."""
    text = str(exc).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not line:
        line = type(exc).__name__
    if len(line) > limit:
        line = line[: limit - 3].rstrip() + "..."
    elif line.endswith(".") and not line.endswith(".."):
        line = line[:-1]  # the caller appends "; <hint>"
    return line
