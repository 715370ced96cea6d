"""Decoding steps whose matrix products read bfloat16 weights, on a float32 model: ``--decode-weights bfloat16``.

On a CPU a decoding step (one token) is bound by reading the weights: each Linear layer is a matrix-vector product
over its whole weight, about 540 MB per token for the default model in float32. Halving those bytes makes the
products faster, while a whole bfloat16 model loses the gain elsewhere (CPU attention in bfloat16 is slow, and
without native bfloat16 instructions a bfloat16 prefill is several times slower than float32). So here only the
products of a decoding step change:

- every ``nn.Linear`` of the model (the output projection included) gets a bfloat16 copy of its weight, made once,
  and an instance ``forward`` that, inside :meth:`DecodePath.step`, multiplies the input rounded to bfloat16 by that
  copy and hands the result back in float32; outside a step it is the module's own forward with the float32 weight.
  transformers' code and the model's classes stay as they are; :func:`detach` removes the copies and the forwards.
- the prefill (and with it the selection scores), the norms, the rotary embedding, the residual stream, the
  attention and the compressed KV cache stay float32: attention reads the float32 cache at float32.
- oneDNN, PyTorch's default kernel library for bfloat16 products on x86, is switched off around each decoding step
  where the CPU computes bfloat16 natively (AVX512_BF16, AMX, Arm bf16), where PyTorch's own matrix-vector kernel
  measured faster at one row, and left on elsewhere (an AVX2 CPU), where oneDNN's measured faster
  (``tools/kernel_probe.py``, ``docs/decisions/2026-12-04-decode-weights.md``). The switch is set on entering a
  step and restored on leaving it, so the prefill always runs with the process's own setting.

:func:`decode_path` attaches the path to a model once (the copies are kept on the model for later answers) and says
why when it does not apply (weights already in reduced precision, a model not on a CPU, quantized layers).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .options import choice

_ATTRIBUTE = "_snapkv_decode_path"


def onednn_for_decode(native_bf16: str | None) -> tuple[bool, str]:
    """``(keep oneDNN on during decoding steps, why)`` on a CPU whose native bfloat16 feature is ``native_bf16``
    (:func:`snapkv_cli.models.cpu_features.native_bf16_feature`)."""
    if native_bf16:
        return False, f"oneDNN off for one-token steps: this CPU computes bfloat16 natively ({native_bf16})"
    return True, "oneDNN on: this CPU has no native bfloat16"


@dataclass
class DecodePath:
    """The bfloat16 decode path attached to one model: its copies, whether a step is running, the kernel setting."""

    onednn: bool
    kernel_reason: str
    dtype: torch.dtype = torch.bfloat16
    active: bool = False
    modules: list[nn.Linear] = field(default_factory=list)
    copied_bytes: int = 0

    @contextlib.contextmanager
    def step(self):
        """One decoding step: the Linear layers read the bfloat16 copies, oneDNN set as :attr:`onednn` says."""
        kernels = contextlib.nullcontext() if self.onednn else torch.backends.mkldnn.flags(enabled=False)
        self.active = True
        try:
            with kernels:
                yield
        finally:
            self.active = False

    def describe(self) -> str:
        """What a decoding step runs and why, for the report's ``weights`` line."""
        name = str(self.dtype).removeprefix("torch.")
        return f"decode steps: {name} Linear weights, attention and KV cache float32 ({self.kernel_reason})"


def _fast_forward(module: nn.Linear, path: DecodePath):
    weight = module.weight.detach().to(path.dtype)
    bias = None if module.bias is None else module.bias.detach().to(path.dtype)
    own = module.forward  # the class's forward, bound to the module
    path.copied_bytes += weight.numel() * weight.element_size()

    def forward(x: torch.Tensor) -> torch.Tensor:
        if path.active:
            return F.linear(x.to(path.dtype), weight, bias).to(x.dtype)
        return own(x)

    return forward


def why_not(model: nn.Module) -> str | None:
    """Why the bfloat16 decode path does not apply to ``model`` (None: it does)."""
    parameter = next(model.parameters(), None)
    if parameter is None or parameter.device.type != "cpu":
        return "the model is not on a CPU"
    if parameter.dtype != torch.float32:
        return f"the weights are already {str(parameter.dtype).removeprefix('torch.')}"
    if getattr(model, "hf_quantizer", None) is not None or any(
            type(module.weight.detach()) is not torch.Tensor for module in model.modules()
            if isinstance(module, nn.Linear)):
        return "the Linear layers are quantized"
    return None


def attach(model: nn.Module, native_bf16: str | None = None, *, onednn: bool | None = None) -> DecodePath:
    """Give every ``nn.Linear`` of float32 ``model`` its bfloat16 copy and switchable forward (once; a second call
    returns the path already attached). ``native_bf16`` (default: detected) chooses oneDNN's setting for the steps,
    ``onednn`` forces it (tests, benchmarks). Raises ``ValueError`` where :func:`why_not` says it does not apply."""
    existing = getattr(model, _ATTRIBUTE, None)
    if existing is not None:
        return existing
    reason = why_not(model)
    if reason:
        raise ValueError(f"bfloat16 decode weights need a float32 model on a CPU: {reason}")
    if native_bf16 is None:
        from ..models.cpu_features import native_bf16_feature

        native_bf16 = native_bf16_feature()
    keep, why = onednn_for_decode(native_bf16)
    if onednn is not None:
        keep, why = onednn, f"oneDNN {'on' if onednn else 'off'} for one-token steps: asked for"
    path = DecodePath(onednn=keep, kernel_reason=why)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.forward = _fast_forward(module, path)
            path.modules.append(module)
    setattr(model, _ATTRIBUTE, path)
    return path


def attached_path(model: nn.Module) -> DecodePath | None:
    """The decode path attached to ``model``, or None."""
    return getattr(model, _ATTRIBUTE, None)


def detach(model: nn.Module) -> None:
    """Remove the decode path from ``model``: its Linear layers run their own forward again, the copies go."""
    path = getattr(model, _ATTRIBUTE, None)
    if path is None:
        return
    for module in path.modules:
        del module.forward
    path.modules.clear()
    delattr(model, _ATTRIBUTE)


def decode_path(model: nn.Module, decode_weights: str) -> tuple[DecodePath | None, str | None]:
    """``(path, None)`` with the path attached for ``decode_weights="bfloat16"`` where it applies; ``(None, why)``
    where it was asked for and does not apply; ``(None, None)`` for ``same`` (a path attached before is detached)."""
    if choice("decode_weights", decode_weights) == "same":
        detach(model)
        return None, None
    reason = why_not(model) if attached_path(model) is None else None
    if reason:
        return None, f"decode steps: the weights as loaded ({reason})"
    return attach(model), None
