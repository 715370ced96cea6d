"""Load a causal LM and its tokenizer: a built-in model (by name, :mod:`snapkv_cli.models.catalog`), a .gguf file
(converted once and cached), a local directory or a Hugging Face id, on a chosen device and dtype."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from snapkv_cli.errors import (
    CacheNotWritable,
    DeviceUnavailable,
    ModelOutOfMemory,
    QuantizationUnavailable,
    UserError,
)
from snapkv_cli.models import catalog, conversion, local_gguf
from snapkv_cli.models.cpu_features import cpu_auto_dtype
from snapkv_cli.models.hf_utils import quiet_transformers, set_hf_env, short_reason
from snapkv_cli.models.placement import parse_device, parse_dtype, parse_quantize
from snapkv_cli.models.sources import check_reachable, model_source

set_hf_env()

Progress = Callable[[str], None]

# torch.OutOfMemoryError is new in torch 2.5; older versions only have the CUDA one.
_OOM: type[BaseException] = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)

_LOAD_HINT = "pass a local directory, a .gguf file, or a Hugging Face id (needs network on first use)"


@dataclass
class LoadedModel:
    """A loaded model and tokenizer; ``device``, ``dtype`` and ``quantization`` are read back from the model's weights,
    ``dtype_reason`` says why that dtype (``auto: ...`` or ``asked for``)."""

    model: Any
    tokenizer: Any
    name: str  # display name
    source: str  # local path or hub id
    device: torch.device
    dtype: torch.dtype
    load_seconds: float
    base_model: bool = False  # not instruction-tuned (or no chat template): completion-style prompts, a stop rule
    dtype_reason: str = "asked for"
    quantization: str | None = None  # "int8": the Linear layers' weights are int8


def is_base_model(tokenizer: Any, entry: catalog.CatalogEntry | None = None) -> bool:
    """A built-in model says whether it is instruction-tuned; any other counts as base without a chat template."""
    if entry is not None:
        return not entry.instruction_tuned
    return not getattr(tokenizer, "chat_template", None)


def resolve_device(device: str) -> torch.device:
    """"auto" -> cuda if available else cpu; "cpu"; "cuda" / "cuda:N" (must exist)."""
    kind, index = parse_device(device)
    if kind == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceUnavailable(device, "CUDA is not available")
    if index is not None and index >= torch.cuda.device_count():
        raise UserError(
            f"device '{device}' does not exist (this machine has {torch.cuda.device_count()} CUDA "
            f"device(s)); use cuda:0..cuda:{torch.cuda.device_count() - 1}"
        )
    return torch.device("cuda", index) if index is not None else torch.device("cuda")


def choose_dtype(dtype: str, device: torch.device) -> tuple[torch.dtype, str]:
    """The dtype to load in and why: "auto" -> bfloat16 on CUDA with bf16 support, else float16 on CUDA; on a CPU
    bfloat16 where it computes it natively (:func:`snapkv_cli.models.cpu_features.cpu_auto_dtype`), else float32.
    The reason is ``auto: ...`` or ``asked for``."""
    name = parse_dtype(dtype)
    if name != "auto":
        return getattr(torch, name), "asked for"
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16, "auto: this GPU supports bfloat16"
        return torch.float16, "auto: this GPU has no bfloat16: float16"
    picked, reason = cpu_auto_dtype()
    return getattr(torch, picked), f"auto: {reason}"


def load_model(
    name: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    attn_implementation: str | None = None,
    device_map: str | None = None,
    progress: Progress | None = None,
    notice: Progress | None = None,
    quantize: str | None = None,
) -> LoadedModel:
    """Load a model and tokenizer, in eval mode, on the resolved device and dtype.

    ``name``: None -> the default model (SmolLM2-135M-Instruct); a built-in model's name or alias
    (``gemma3-270m``) -> that model, fetched and converted once into the cache; a path ending in
    ``.gguf`` -> that file, converted once and cached by its content hash; an existing directory ->
    ``from_pretrained``; an ``org/name`` Hugging Face id -> fetched by transformers on first use (refused within
    seconds when it is not cached and the Hub cannot be reached); any other name is an error
    (:func:`snapkv_cli.models.sources.model_source`).
    A converted model (built-in or .gguf) loaded in bfloat16 reads a bfloat16 copy saved once beside it
    (:func:`snapkv_cli.models.conversion.dtype_copy`). ``quantize="int8"`` makes the decoder's Linear weights int8
    (:func:`quantization_config`). With ``device_map`` set, placement is left to transformers/accelerate.
    ``progress`` hears of each step,
    ``notice`` of what must be shown whatever the output (a built-in model's terms at its first fetch; unset:
    ``progress``).
    """
    say = progress or (lambda _msg: None)
    torch_device = resolve_device(device)
    torch_dtype, dtype_reason = choose_dtype(dtype, torch_device)
    scheme = parse_quantize(quantize)
    started = time.monotonic()

    origin = model_source(name)  # a typo fails here, before anything is fetched
    check_reachable(origin)
    entry = origin.entry
    display = origin.name
    if origin.kind == "builtin":
        source = str(entry.ensure(progress=say, notice=notice))
    elif origin.kind == "gguf":
        source = str(_converted_gguf(display, origin.path, say))
    elif origin.kind == "directory":
        source = str(origin.path)
    else:
        source = display  # a Hugging Face id
    if origin.kind in ("builtin", "gguf"):
        source = str(_in_dtype(Path(source), torch_dtype_name(torch_dtype), say))

    say(f"Loading {display} ({torch_dtype_name(torch_dtype)}{', ' + scheme if scheme else ''}, {torch_device})...")
    model, tokenizer = _from_pretrained(display, source, torch_dtype, torch_device, attn_implementation, device_map,
                                        scheme)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=display,
        source=source,
        device=_model_device(model, torch_device),
        dtype=_model_dtype(model, torch_dtype),
        load_seconds=time.monotonic() - started,
        base_model=is_base_model(tokenizer, entry),
        dtype_reason=dtype_reason,
        quantization=model_quantization(model),
    )


def _in_dtype(converted: Path, dtype: str, say: Progress) -> Path:
    """The converted directory's copy in ``dtype`` (made once); the float32 directory itself, converted at load,
    where the cache cannot be written."""
    try:
        return conversion.dtype_copy(converted, dtype, say)
    except CacheNotWritable as exc:
        say(f"Could not save a {dtype} copy ({exc}); converting at load instead.")
        return converted


def quantization_config(scheme: str):
    """transformers' torchao configuration for ``scheme`` (``int8``): weight-only int8 with one scale per output
    row for every Linear layer of the decoder. The output layer stays in the model's dtype: it is tied to the
    embeddings, which torchao does not quantize, so quantizing it would keep a second copy of the largest matrix.

    Quantized at every load, not cached: on the default model torchao's int8 copy saved as safetensors (164 MB)
    reloaded in 3.0-3.5 s, no faster than quantizing the bfloat16 copy at load (0.8-3.6 s, same machine under load;
    docs/decisions/2026-12-02-cpu-weight-dtype.md).
    """
    import importlib

    try:  # called after quiet_transformers(), which also silences torchao's import warnings
        quantization = importlib.import_module("torchao.quantization")
    except ImportError as exc:
        raise QuantizationUnavailable(scheme, f"importing it failed ({exc})") from None
    from transformers import TorchAoConfig

    return TorchAoConfig(quantization.Int8WeightOnlyConfig(), modules_to_not_convert=["lm_head"])


def model_quantization(model: Any) -> str | None:
    """``int8`` when the model's Linear layers hold int8 weights (read back from them), else None."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and getattr(module.weight, "qdata", None) is not None:
            return str(module.weight.qdata.dtype).removeprefix("torch.")
    return None


def _converted_gguf(raw: str, path: Path, say: Progress) -> Path:
    """The cached conversion of the GGUF at ``path`` (made now on first use); a file transformers cannot read is a
    :class:`UserError`."""
    try:
        return local_gguf.ensure(path, progress=say)
    except UserError:
        raise
    except (OSError, ValueError, KeyError, ImportError, RuntimeError) as exc:
        raise UserError(f"could not load model '{raw}': {short_reason(exc)}; {_LOAD_HINT}") from None


def torch_dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _model_device(model: Any, fallback: torch.device) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError, TypeError):
        return fallback


def _model_dtype(model: Any, fallback: torch.dtype) -> torch.dtype:
    """The dtype the model's weights really have (what reports show), not the one asked for."""
    try:
        return next(parameter.dtype for parameter in model.parameters() if parameter.is_floating_point())
    except (StopIteration, AttributeError, TypeError):
        return fallback


def _from_pretrained(
    display: str,
    source: str,
    torch_dtype: torch.dtype,
    torch_device: torch.device,
    attn_implementation: str | None,
    device_map: str | None,
    quantize: str | None = None,
) -> tuple[Any, Any]:
    quiet_transformers()
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled  # transformers 5 needs hub >= 1.3
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if attn_implementation:
        model_kwargs["attn_implementation"] = attn_implementation
    if device_map:
        model_kwargs["device_map"] = device_map
    if quantize:
        model_kwargs["quantization_config"] = quantization_config(quantize)

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, **model_kwargs)
    except _OOM:
        raise ModelOutOfMemory(display, str(torch_device)) from None
    except (OSError, ValueError, KeyError, ImportError, HfHubHTTPError, OfflineModeIsEnabled) as exc:
        raise UserError(f"could not load model '{display}': {short_reason(exc)}; {_LOAD_HINT}") from None

    if not device_map:
        try:
            model = model.to(torch_device)
        except _OOM:
            raise ModelOutOfMemory(display, str(torch_device)) from None
    model.eval()
    return model, tokenizer
