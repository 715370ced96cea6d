"""4-bit codes of weights that already are 4-bit blocks (``snapkv_cli.generation.four_bit``): found only where they
reproduce the weight, and multiplied as a bfloat16 product of those weights would be."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from snapkv_cli.generation.four_bit import GROUP, four_bit_codes


def blocks(rows: int, columns: int, seed: int = 0) -> torch.Tensor:
    """A (rows, columns) float32 weight of Q4_1 blocks built as llama.cpp dequantizes them: per block of GROUP a
    float16 scale ``d`` and least value ``m``, each weight ``d * q + m`` with a code ``q`` in 0..15 (0 and 15 both
    used, as min-max quantization makes them)."""
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (rows, columns // GROUP, GROUP), generator=generator)
    codes[..., 0], codes[..., 1] = 0, 15
    d = (torch.rand(rows, columns // GROUP, 1, generator=generator) * 0.01 + 1e-4).half().float()
    m = (torch.randn(rows, columns // GROUP, 1, generator=generator) * 0.05).half().float()
    return (d * codes + m).view(rows, columns)


def expected_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The product the operator should give, computed apart: ``x`` rounded to bfloat16 times the weight rebuilt from
    bfloat16 scales and offsets (the operator's layout: (code - 8) * scale + offset), in float64."""
    rows, columns = weight.shape
    grouped = weight.view(rows, columns // GROUP, GROUP).double()
    low, high = grouped.amin(-1, keepdim=True), grouped.amax(-1, keepdim=True)
    scale = ((high - low) / 15)
    codes = ((grouped - low) / scale).round()
    scale16 = scale.to(torch.bfloat16).double()
    offset16 = (low + 8 * scale).to(torch.bfloat16).double()
    rebuilt = ((codes - 8) * scale16 + offset16).view(rows, columns)
    return x.to(torch.bfloat16).double() @ rebuilt.t()


@pytest.mark.parametrize("rows,columns", [(16, 32), (48, 96), (96, 128)])
def test_the_codes_multiply_as_the_weight_rebuilt_from_bfloat16_scales_and_offsets(rows, columns):
    weight = blocks(rows, columns)
    codes = four_bit_codes(weight)
    assert codes is not None
    x = torch.randn(2, 3, columns, generator=torch.Generator().manual_seed(1))
    out = codes.product(x)
    assert out.shape == (2, 3, rows) and out.dtype == torch.float32
    expected = expected_product(x.reshape(-1, columns), weight).view(2, 3, rows)
    # the operator hands back bfloat16 (8 significant bits): a product is within 2**-8 of its size
    assert torch.allclose(out.double(), expected, rtol=2 ** -7, atol=1e-3 * float(expected.abs().max()))
    assert codes.nbytes == rows * columns // 2 + (columns // GROUP) * rows * 2 * 2


def test_a_bias_is_added_in_float32():
    weight, bias = blocks(16, 64), torch.randn(16)
    x = torch.randn(1, 64)
    with_bias, without = four_bit_codes(weight, bias), four_bit_codes(weight)
    assert torch.equal(with_bias.product(x), without.product(x) + bias)


def test_weights_that_are_not_four_bit_blocks_get_no_codes():
    assert four_bit_codes(torch.randn(16, 64)) is None  # a float32 weight of any values
    nudged = blocks(16, 64)
    nudged[3, 5] += 1e-4  # one weight off its block's 16 values
    assert four_bit_codes(nudged) is None
    slightly = blocks(16, 64)
    slightly[3, 5] += 1e-6  # off by more than float32's rounding of a value of this size (about 1e-8), if not by much
    assert four_bit_codes(slightly) is None
    assert four_bit_codes(blocks(16, 64).to(torch.bfloat16).float()) is None  # values rounded off the grid
    # shapes the operator cannot pack: columns not whole blocks, rows not a multiple of 16
    assert four_bit_codes(blocks(16, 64)[:, :48]) is None
    assert four_bit_codes(blocks(24, 64)) is None
    assert four_bit_codes(blocks(32, 64)) is not None


def test_a_block_of_one_repeated_value_has_codes_too():
    weight = blocks(16, 64)
    weight[0, :GROUP] = 0.25  # scale zero: every code 0, the value the offset
    weight[1] = 0.0  # a row of zeros: no rounding to allow for at all
    codes = four_bit_codes(weight)
    assert codes is not None
    x = torch.zeros(1, 64)
    x[0, :GROUP] = 1.0
    out = codes.product(x)
    assert float(out[0, 0]) == pytest.approx(0.25 * GROUP, rel=2 ** -7) and float(out[0, 1]) == 0.0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 16), rows=st.sampled_from([16, 32]), groups=st.integers(1, 4))
def test_any_q4_1_weight_is_found_and_rebuilt(seed, rows, groups):
    weight = blocks(rows, groups * GROUP, seed)
    codes = four_bit_codes(weight)
    assert codes is not None
    eye = torch.eye(groups * GROUP)
    rebuilt = codes.product(eye).t()  # (rows, columns): each weight, as the operator sees it
    assert torch.allclose(rebuilt, weight, rtol=2 ** -7, atol=2 ** -7 * float(weight.abs().max()))
