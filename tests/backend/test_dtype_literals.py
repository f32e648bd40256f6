"""Scalars and fill values take the dtype of the tensor they meet, in Triton kernels
(run in the interpreter without a GPU): programs of ``dtype_programs.py``, and the
rendering of literals and fill values itself."""
import pytest
import sympy
import torch

from surge.codegen.triton.ops import literal
from surge.lowering.values import Constant, IndexValue, Masked, scalar_of

from .dtype_programs import PROGRAMS, assert_exact
from .helpers import compile_fn


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_eager_exactly(name):
    fn, make = PROGRAMS[name]
    compiled = compile_fn(fn, *make())
    assert compiled.kernel_names, "lowered to kernels, not run as ATen ops"
    inputs = make()   # fresh values: nothing was folded into the kernels
    assert_exact(compiled(*inputs), fn(*inputs))


def test_scalars_are_elements_of_their_dtype():
    assert scalar_of(-100.0, torch.int64) == -100 and type(scalar_of(-100.0, torch.int64)) is int
    assert scalar_of(300, torch.uint8) == 44 and scalar_of(-1, torch.uint8) == 255
    assert scalar_of(200, torch.int8) == -56 and scalar_of(2**40, torch.int64) == 2**40
    assert scalar_of(3, torch.float16) == 3.0 and type(scalar_of(3, torch.float16)) is float
    assert scalar_of(2, torch.bool) is True


def test_fill_value_of_an_integer_body_is_an_integer():
    body = IndexValue(sympy.Symbol("i0"), torch.int64)
    masked = Masked(Constant(True, torch.bool), body, -100.0)
    assert masked.other == -100 and type(masked.other) is int
    assert masked is Masked(Constant(True, torch.bool), body, -100)   # the same value, interned once


@pytest.mark.parametrize("value, dtype, text", [
    (-100.0, torch.int64, "-100"), (2**40, torch.int64, str(2**40)), (3, torch.float32, "3.0"),
    (float("-inf"), torch.bfloat16, 'float("-inf")'), (float("nan"), torch.float16, 'float("nan")'),
    (True, torch.bool, "1"), (0.0, torch.bool, "0"), (7.0, torch.uint8, "7"),
])
def test_triton_literals_follow_the_dtype(value, dtype, text):
    assert literal(value, dtype) == text
