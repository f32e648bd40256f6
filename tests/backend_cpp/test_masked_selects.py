"""Masked values whose loads are in bounds everywhere become selects, not branches.

A cat of pieces loads each piece under its own mask; when every load of a piece stays
inside its buffer on the whole loop domain, mask or not (a rotary interleave of (even,
odd) pairs), the mask guards nothing and the C++ is a select the compiler vectorizes.
Loads that would leave their buffer where the mask is off (padding, rotate_half's shifted
halves, a cat along a longer dimension) keep the branch.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .helpers import assert_matches_eager, compile_cases, randn


def rotary_interleaved(q, cos, sin):
    """Rotary embedding on (even, odd) pairs, as complex-number rotaries write it."""
    a, b = q[..., 0::2], q[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def rotate_half(q, cos, sin):
    half = q.shape[-1] // 2
    return q * torch.cat([cos, cos], -1) + torch.cat([-q[..., half:], q[..., :half]], -1) * torch.cat([sin, sin], -1)


def padded(x):
    return F.pad(x, (3, 2)) * 2.0


def cat_longer(x, y):
    return torch.cat([x, y], dim=-1) + 1.0


def _rotary_inputs():
    return randn(2, 3, 10, 16), randn(10, 8), randn(10, 8)


def _half_inputs():
    return randn(2, 3, 10, 16), randn(10, 8), randn(10, 8)


CASES = {
    "rotary_interleaved": (rotary_interleaved, _rotary_inputs),
    "rotate_half": (rotate_half, _half_inputs),
    "padded": (padded, lambda: (randn(5, 7),)),
    "cat_longer": (cat_longer, lambda: (randn(4, 5), randn(4, 9))),
}


@pytest.fixture(scope="module")
def compiled():
    return compile_cases(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name):
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    inputs[0].view(-1)[::7] = float("nan")   # NaN reaches the output through either side
    assert_matches_eager(fn, compiled[name], *inputs)


def test_in_bounds_pieces_are_selects_and_the_rest_keep_their_branches(compiled):
    assert "if (" not in compiled["rotary_interleaved"].cpp_source
    # rotate_half's second half reads q[..., k - 8]: below the buffer's start where the
    # mask is off; padding reads past the row: both must stay under their masks
    for name in ("rotate_half", "padded", "cat_longer"):
        assert "if (" in compiled[name].cpp_source, name
