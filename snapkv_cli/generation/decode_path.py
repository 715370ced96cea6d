"""Decoding steps whose matrix products read smaller weights, on a float32 model: ``--decode-weights bfloat16``
(or ``int4``).

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
  (``tools/probes/decode/kernels.py``, ``docs/decisions/2026-12-04-decode-weights.md``). The switch is set on entering a
  step and restored on leaving it, so the prefill always runs with the process's own setting.

With ``int4`` the Linear layers whose weights already are 4-bit blocks (the built-in default model's, from its Q4_1
GGUF: :mod:`.four_bit`) multiply by those 4-bit codes instead, a quarter of bfloat16's bytes, with the same rounding
of their inputs; the layers that are not (its output projection) keep the bfloat16 copy. Where a layer of
:data:`PACKS` reads the same input as its siblings (the query, key and value projections; the gate and up
projections), the pack's codes are one matrix and the first call of a step computes the whole product, the others
taking their part of it: fewer, larger products, which two threads share better.

:func:`decode_path` attaches the path to a model once (the copies are kept on the model for later answers) and says
why when it does not apply (weights already in reduced precision, a model not on a CPU, quantized layers).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .four_bit import FourBitCodes, four_bit_codes
from .options import choice

_ATTRIBUTE = "_snapkv_decode_path"
# Linear layers that transformers' attention and MLP modules call on the same input, in this order, where a model
# has them under these names (Llama, Mistral, Qwen, Gemma): with int4 each pack multiplies as one matrix
PACKS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def onednn_for_decode(native_bf16: str | None) -> tuple[bool, str]:
    """``(keep oneDNN on during decoding steps, why)`` on a CPU whose native bfloat16 feature is ``native_bf16``
    (:func:`snapkv_cli.models.cpu_features.native_bf16_feature`)."""
    if native_bf16:
        return False, f"oneDNN off for one-token steps: this CPU computes bfloat16 natively ({native_bf16})"
    return True, "oneDNN on: this CPU has no native bfloat16"


@dataclass
class DecodePath:
    """The decode path attached to one model: what its steps multiply by, whether a step is running, the kernel
    setting."""

    onednn: bool
    kernel_reason: str
    weights: str = "bfloat16"  # the --decode-weights value it was attached for
    active: bool = False
    modules: list[nn.Linear] = field(default_factory=list)
    copied_bytes: int = 0  # the bfloat16 copies' and 4-bit codes' bytes
    four_bit_layers: int = 0  # Linear layers whose steps multiply 4-bit codes
    _packs: list[dict] = field(default_factory=list)  # each pack's product for the step under way

    @contextlib.contextmanager
    def step(self):
        """One decoding step: the Linear layers read the bfloat16 copies (or 4-bit codes), oneDNN set as
        :attr:`onednn` says."""
        kernels = contextlib.nullcontext() if self.onednn else torch.backends.mkldnn.flags(enabled=False)
        self.active = True
        try:
            with kernels:
                yield
        finally:
            self.active = False
            for products in self._packs:
                products.clear()

    def describe(self) -> str:
        """What a decoding step runs and why, for the report's ``weights`` line."""
        if self.weights != "int4":
            return f"decode steps: bfloat16 Linear weights, attention and KV cache float32 ({self.kernel_reason})"
        layers = len(self.modules)
        if not self.four_bit_layers:
            return (f"decode steps: bfloat16 Linear weights (int4: no layer's weights are 4-bit blocks), attention "
                    f"and KV cache float32 ({self.kernel_reason})")
        rest = "" if self.four_bit_layers == layers else ", bfloat16 for the rest"
        return (f"decode steps: int4 codes for {self.four_bit_layers} of {layers} Linear layers (their weights are "
                f"4-bit blocks){rest}, attention and KV cache float32 ({self.kernel_reason})")


def _bf16_forward(module: nn.Linear, path: DecodePath):
    weight = module.weight.detach().to(torch.bfloat16)
    bias = None if module.bias is None else module.bias.detach().to(torch.bfloat16)
    own = module.forward  # the class's forward, bound to the module
    path.copied_bytes += weight.numel() * weight.element_size()

    def forward(x: torch.Tensor) -> torch.Tensor:
        if path.active:
            return F.linear(x.to(torch.bfloat16), weight, bias).to(x.dtype)
        return own(x)

    return forward


def _four_bit_forward(module: nn.Linear, codes: FourBitCodes, path: DecodePath):
    own = module.forward
    path.copied_bytes += codes.nbytes

    def forward(x: torch.Tensor) -> torch.Tensor:
        return codes.product(x) if path.active else own(x)

    return forward


def _pack_forwards(members: list[nn.Linear], codes: FourBitCodes, path: DecodePath) -> list:
    """Forwards for a pack's layers sharing one product per step: the step's first call on an input computes the
    whole pack, every call on that same input (the same tensor) takes its part; another input computes anew."""
    sizes = [member.out_features for member in members]
    products: dict = {}
    path._packs.append(products)
    path.copied_bytes += codes.nbytes

    def make(index: int, own):
        def forward(x: torch.Tensor) -> torch.Tensor:
            if not path.active:
                return own(x)
            if products.get("input") is not x:  # held until the step ends, so no other tensor can reuse its id
                products["input"], products["parts"] = x, codes.product(x).split(sizes, dim=-1)
            return products["parts"][index]

        return forward

    return [make(index, member.forward) for index, member in enumerate(members)]


def _four_bit_packs(model: nn.Module) -> dict[nn.Linear, tuple[list[nn.Linear], FourBitCodes]]:
    """Every Linear layer of a :data:`PACKS` pack whose layers are all 4-bit blocks of one input size: the pack's
    layers and their codes as one matrix."""
    packs = {}
    for parent in model.modules():
        for names in PACKS:
            members = [getattr(parent, name, None) for name in names]
            if not all(isinstance(member, nn.Linear) for member in members) or len(
                    {member.in_features for member in members}) != 1:
                continue
            biases = [member.bias for member in members]
            if len({bias is None for bias in biases}) != 1:
                continue
            bias = None if biases[0] is None else torch.cat([bias.detach() for bias in biases])
            codes = four_bit_codes(torch.cat([member.weight.detach() for member in members]), bias)
            if codes is not None:
                packs.update({member: (members, codes) for member in members})
    return packs


def why_not(model: nn.Module) -> str | None:
    """Why the decode path (bfloat16 or int4) does not apply to ``model`` (None: it does)."""
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


def attach(model: nn.Module, native_bf16: str | None = None, *, onednn: bool | None = None,
           weights: str = "bfloat16") -> DecodePath:
    """Give every ``nn.Linear`` of float32 ``model`` its bfloat16 copy (with ``weights="int4"``, its 4-bit codes where
    its weight is 4-bit blocks) and switchable forward (once; a second call for the same ``weights`` returns the path
    already attached, for other ones attaches anew). ``native_bf16`` (default: detected) chooses oneDNN's setting for
    the steps, ``onednn`` forces it (tests, benchmarks). Raises ``ValueError`` where :func:`why_not` says it does not
    apply."""
    existing = getattr(model, _ATTRIBUTE, None)
    if existing is not None and existing.weights == weights:
        return existing
    detach(model)
    reason = why_not(model)
    if reason:
        raise ValueError(f"{weights} decode weights need a float32 model on a CPU: {reason}")
    if native_bf16 is None:
        from ..models.cpu_features import native_bf16_feature

        native_bf16 = native_bf16_feature()
    keep, why = onednn_for_decode(native_bf16)
    if onednn is not None:
        keep, why = onednn, f"oneDNN {'on' if onednn else 'off'} for one-token steps: asked for"
    path = DecodePath(onednn=keep, kernel_reason=why, weights=weights)
    linears = [module for module in model.modules() if isinstance(module, nn.Linear)]
    packs = _four_bit_packs(model) if weights == "int4" else {}
    forwards = {}
    for module in linears:
        if module in forwards:  # a pack's later layer
            continue
        if module in packs:
            members, codes = packs[module]
            forwards.update(zip(members, _pack_forwards(members, codes, path)))
            path.four_bit_layers += len(members)
            continue
        codes = four_bit_codes(module.weight, module.bias) if weights == "int4" else None
        path.four_bit_layers += codes is not None
        forwards[module] = (_four_bit_forward(module, codes, path) if codes is not None
                            else _bf16_forward(module, path))
    for module in linears:
        module.forward = forwards[module]
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
    """``(path, None)`` with the path attached for ``decode_weights`` ``bfloat16`` or ``int4`` where it applies;
    ``(None, why)`` where it was asked for and does not apply; ``(None, None)`` for ``same`` (a path attached before
    is detached)."""
    weights = choice("decode_weights", decode_weights)
    if weights == "same":
        detach(model)
        return None, None
    reason = why_not(model)
    if reason:
        return None, f"decode steps: the weights as loaded ({reason})"
    return attach(model, weights=weights), None
