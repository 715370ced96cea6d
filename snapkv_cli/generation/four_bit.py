"""Weights that already are 4-bit groups, multiplied as 4-bit codes on a CPU (``--decode-weights int4``).

A GGUF model quantized to Q4_1 stores each row of a matrix in blocks of 32 weights, each block 16 evenly spaced
values (a scale and an offset, and a 4-bit code per weight); the built-in default model's Linear layers are such
blocks, dequantized to float32 when the GGUF was converted. Such a weight can be stored again as its codes, scales
and offsets, and PyTorch has a CPU operator that multiplies by them directly (``_weight_int4pack_mm_for_cpu``: a
quarter of bfloat16's bytes, measured 1.5x bfloat16's speed on a one-row product). :func:`four_bit_codes` finds the
codes of a weight only where they reproduce it (min-max per block, as Q4_1 is built, to float32's rounding); any
other weight returns None and is not approximated here. The operator takes bfloat16 inputs and bfloat16 scales and
offsets (the GGUF's are float16), so a product rounds as a bfloat16 product does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GROUP = 32  # weights per block sharing a scale and an offset (Q4_1's block)
ROWS_MULTIPLE = 16  # the operator packs rows in sixteens


def operator_available() -> bool:
    """Whether this PyTorch has the CPU operators for 4-bit codes (added in torch 2.5; ``torch>=2.4`` is allowed)."""
    return all(hasattr(torch.ops.aten, name) for name in (
        "_convert_weight_to_int4pack_for_cpu", "_weight_int4pack_mm_for_cpu"))


@dataclass
class FourBitCodes:
    """A (rows, columns) weight as packed 4-bit codes with a bfloat16 scale and offset per block of :data:`GROUP`
    columns of a row: weight = (code - 8) * scale + offset, the operator's layout."""

    packed: torch.Tensor  # uint8 (rows, columns / 2), the operator's packing
    scales_and_offsets: torch.Tensor  # bfloat16 (columns / GROUP, rows, 2)
    bias: torch.Tensor | None = None  # float32 (rows,)

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scales_and_offsets.nbytes

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T (+ bias)`` for ``x`` (..., columns), computed on ``x`` rounded to bfloat16; float32 out."""
        rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, GROUP, self.scales_and_offsets)
        out = out.to(x.dtype).view(*x.shape[:-1], -1)
        return out if self.bias is None else out + self.bias


def four_bit_codes(weight: torch.Tensor, bias: torch.Tensor | None = None) -> FourBitCodes | None:
    """The codes of ``weight`` (rows, columns), or None where they would not reproduce it (beyond a few float32
    rounding steps of the block's largest value) or where its shape does not fit the operator (columns a multiple of
    :data:`GROUP`, rows of :data:`ROWS_MULTIPLE`)."""
    rows, columns = weight.shape
    if columns % GROUP or rows % ROWS_MULTIPLE or not operator_available():
        return None
    blocks = weight.detach().float().reshape(rows, columns // GROUP, GROUP)
    low, high = blocks.amin(dim=-1, keepdim=True), blocks.amax(dim=-1, keepdim=True)
    scales = (high - low) / 15
    codes = torch.where(scales > 0, (blocks - low) / scales, 0).round_()
    # 16 evenly spaced values from the block's least, to float32's rounding of the conversion that made them
    rounding = 4 * torch.finfo(torch.float32).eps * torch.maximum(low.abs(), high.abs())
    if not bool(((codes * scales + low - blocks).abs() <= rounding).all()):
        return None
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).view(rows, columns), 1)
    scales, low = scales.squeeze(-1), low.squeeze(-1)
    pairs = torch.stack([scales.t(), (low + 8 * scales).t()], dim=-1).to(torch.bfloat16).contiguous()
    return FourBitCodes(packed, pairs, None if bias is None else bias.detach().float())
