"""A 1-D pointwise kernel with a long chain of ops per element computes INTERLEAVE elements
(one in each part of the range) per loop iteration, their statements interleaved, and the
rest of the range after the parts as one chain (codegen/cpp/kernel.py)."""
import re

import pytest
import torch

from surge.codegen.cpp.kernel import INTERLEAVE, INTERLEAVE_MIN_ELEMENTS

from .helpers import assert_matches_eager, compile_cases


def relu_chain(x):
    for _ in range(10):
        x = torch.relu(x * 1.01 + 0.1)
    return x


def chain_with_positions(x):
    # reads the element's own position (an index value) and NaN must pass through
    y = x + torch.arange(x.numel(), dtype=torch.float32) * 1e-4
    for _ in range(10):
        y = torch.maximum(torch.tanh(y) * 1.5, y - 1.0)
    return y


def short(x):
    return torch.relu(x * 2.0 + 1.0)


ODD = INTERLEAVE_MIN_ELEMENTS * 2 + 3   # parts of 2048 elements and a rest of 3
CASES = {
    "relu_chain": (relu_chain, lambda: (torch.randn(ODD),)),
    "chain_with_positions": (chain_with_positions,
                             lambda: (torch.where(torch.rand(ODD) < 0.01, float("nan"), torch.randn(ODD)),)),
    "short": (short, lambda: (torch.randn(ODD),)),
    "small": (relu_chain, lambda: (torch.randn(INTERLEAVE_MIN_ELEMENTS // 2),)),
}


@pytest.fixture(scope="module")
def built():
    return compile_cases(CASES)


def _chains(source: str) -> int:
    """How many elements one iteration of the kernel's first loop computes (its loads)."""
    body = source.split("for (int64_t x0 = 0;", 1)[1].split("\n    }", 1)[0]
    return len(re.findall(r"= in0\[", body))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(built, name):
    fn, make = CASES[name]
    assert_matches_eager(fn, built[name], *make(), rtol=1e-5, atol=1e-5)


def test_long_chains_are_interleaved_and_the_rest_runs_after(built):
    for name in ("relu_chain", "chain_with_positions"):
        source = built[name].cpp_source.split(f"static void {built[name].kernel_names[0]}", 1)[1]
        assert _chains(source) == INTERLEAVE, name
        assert f"x0 < {ODD // INTERLEAVE};" in source and f"x0 = {ODD // INTERLEAVE * INTERLEAVE}; x0 < {ODD};" in source


def test_short_chains_and_small_kernels_stay_one_chain(built):
    for name in ("short", "small"):
        source = built[name].cpp_source.split(f"static void {built[name].kernel_names[0]}", 1)[1]
        assert _chains(source) == 1, name
