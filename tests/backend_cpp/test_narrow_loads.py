"""Bool masks in short reduction rows are widened to int32 once per row (narrow_loads.py)."""
from __future__ import annotations

import pytest
import torch

from surge.codegen.cpp.narrow_loads import MAX_ROW

from .helpers import assert_matches_eager, compile_cases, randn


def masked_softmax(x, mask):
    return torch.softmax(x.masked_fill(~mask, float("-inf")) * 0.25, dim=-1)


def masked_sum_two_dims(x, mask):
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype)).sum(dim=(1, 2))


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


CASES = {
    "softmax_16": (masked_softmax, lambda: (randn(2, 4, 16, 16), causal(16))),
    "softmax_long": (masked_softmax, lambda: (randn(1, 2, 8, 2 * MAX_ROW), torch.rand(8, 2 * MAX_ROW) > 0.3)),
    "sum_two_dims": (masked_sum_two_dims, lambda: (randn(6, 3, 10), torch.rand(3, 10) > 0.5)),
}


@pytest.fixture(scope="module")
def compiled():
    return compile_cases(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name):
    fn, make_inputs = CASES[name]
    for _ in range(2):
        assert_matches_eager(fn, compiled[name], *make_inputs(), atol=1e-5, rtol=1e-5)


def test_masked_rows_with_nan_and_inf_match_eager(compiled):
    x, mask = CASES["softmax_16"][1]()
    x[0, 0, 3, 1] = float("nan")
    x[1, 2, 5, 0] = float("inf")
    mask[7, :] = False   # a fully masked row: NaN in eager too
    assert_matches_eager(masked_softmax, compiled["softmax_16"], x, mask, atol=1e-5, rtol=1e-5)


def test_short_rows_stage_the_mask_and_long_rows_do_not(compiled):
    short = compiled["softmax_16"].cpp_source
    assert "alignas(64) int32_t narrow0[16];" in short
    assert short.count("narrow0[") >= 3, "staged once, loaded by both passes that read the mask"
    assert "narrow" not in compiled["softmax_long"].cpp_source
    assert "narrow0[" in compiled["sum_two_dims"].cpp_source
