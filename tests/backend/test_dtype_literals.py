"""Scalars and fill values take the dtype of the tensor they meet, in Triton kernels
(run in the interpreter without a GPU): programs of ``dtype_programs.py``, and the
rendering of literals and fill values itself."""
import pytest
import sympy
import torch

from surge.codegen.triton.ops import literal
from surge.lowering.values import Constant, IndexValue, Masked, scalar_of
from surge.runtime.target_compile import compile_in_subprocess

from .dtype_programs import PROGRAMS, assert_exact
from .helpers import compile_fn


MODULE_PATHS = {}   # program -> its generated module, compiled for sm_90 below


def _compile(name):
    fn, make = PROGRAMS[name]
    compiled = compile_fn(fn, *make())
    MODULE_PATHS[name] = compiled.path
    return compiled


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU tensors run in the Triton interpreter only without a GPU; "
                    "test_program_matches_eager_exactly_on_gpu runs the programs compiled")
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_eager_exactly(name):
    fn, make = PROGRAMS[name]
    compiled = _compile(name)
    assert compiled.kernel_names, "lowered to kernels, not run as ATen ops"
    inputs = make()   # fresh values: nothing was folded into the kernels
    assert_exact(compiled(*inputs), fn(*inputs))


def test_programs_compile_for_sm90():
    """The interpreter is lenient with types (a float offset, a literal's .to()); Triton's
    compiler for the H200 is not."""
    for name in set(PROGRAMS) - set(MODULE_PATHS):
        _compile(name)
    results = compile_in_subprocess(sorted(set(MODULE_PATHS.values())))
    assert results and all(v == "ok" for v in results.values()), results


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


# programs that make CPU tensors of their own: next to CUDA inputs eager refuses them (arange,
# full), or they run as ATen ops (a 0-d scalar_tensor; test_mixed_devices.py)
MAKES_CPU_TENSORS = {"full_int64_index", "arange_start_step_index", "arange_of_one_as_float",
                     "arange_of_one_arithmetic_as_float", "scalar_tensor_times_int"}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - MAKES_CPU_TENSORS))
def test_program_matches_eager_exactly_on_gpu(name):
    """Compiled kernels, not the interpreter: a GPU's max drops NaN, its integer division
    truncates, a pointer takes no float offset."""
    fn, make = PROGRAMS[name]

    def on_gpu():
        return tuple(t.cuda() for t in make())
    compiled = compile_fn(fn, *on_gpu())
    assert compiled.kernel_names
    inputs = on_gpu()
    assert_exact(compiled(*inputs), fn(*inputs))
