"""Explicit vector loops for 16-bit floats (codegen/cpp/vector16.py): bit for bit with eager.

The kernels here are chosen so that eager's result is exactly determined (no sums whose
order could differ): every output bit must then match eager's, NaN positions included
(eager's own NaN bits differ between its vector and scalar paths, so NaN is compared as
NaN). The inputs hold what the vector path must hand to the scalar one or round
exactly itself: NaN, +-inf, denormals, values halfway between two bf16/fp16 values,
values that round to inf, and sizes with tails.
"""
from __future__ import annotations

import subprocess

import pytest
import torch

from surge.codegen.cpp.prelude import PRELUDE
from surge.codegen.cpp.vector16 import BLOCK, HELPERS
from surge.runtime.cpp_build import COMPILE_FLAGS, DEFAULT_CXX
from surge.tools.workloads import rmsnorm

from .helpers import assert_matches_eager, compile_cases, randn

VECTOR_LOOP = "#ifdef SURGE_VEC16"


def to_bf16(x):
    return x.to(torch.bfloat16)


def to_f16(x):
    return x.to(torch.float16)


def scaled_bf16(x, scale):
    # a per-row scale broadcast along the row, rounded to bf16 twice as in RMSNorm's epilogue
    return (x.float() * scale).to(torch.bfloat16).float().mul(0.75).to(torch.bfloat16)


def max_normalized(x, w):
    # a row reduction whose result is exact (max), then the RMSNorm-like epilogue in the row loop
    xf = x.float()
    return (xf / xf.abs().amax(-1, keepdim=True)).to(x.dtype) * w


def sliced_rows(x):
    # a slice of each row: the x loops do not merge, the inner one is contiguous
    return x[:, :600].float().mul(0.5).to(torch.bfloat16)


def sliced_max_normalized(x):
    # a reduction over two dims that do not merge (a slice of the last): two r loops
    xs = x[:, :, :40].float()
    return (xs / xs.abs().amax(dim=(1, 2), keepdim=True)).to(torch.bfloat16)


def layer_norm_bf16(x, w, b):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)


def half_chain(x, y):
    return torch.where(x > y, torch.maximum(x, y) - y, torch.relu(-x) * 2).to(torch.float16)


def float_only(x, y):
    return x * y + 1


def transposed(x):
    # the kernel writes a contiguous result reading x across its rows: no contiguous vector load
    return x.t().contiguous().float().mul(0.5).to(torch.bfloat16)


def transposed_like_input(x):
    # the result keeps x's transposed layout (as eager's): the loop runs in memory order,
    # so loads and stores are contiguous again and get the vector form
    return x.t().float().mul(0.5).to(torch.bfloat16)


def gelu_bf16(x):
    return torch.nn.functional.gelu(x.float()).to(torch.bfloat16)


def gelu_from_bf16(x):
    return torch.nn.functional.gelu(x.float())   # float32 out: every bit of the formula shows


def tanh_gelu_bf16(x):
    return torch.nn.functional.gelu(x.float(), approximate="tanh").to(torch.bfloat16)


def _gelu_rows():
    # 87 columns: five vector steps and a scalar tail of 7 that repeats the first 7 columns
    x = randn(4, 87) * 4
    x[:, 80:] = x[:, :7]
    x[0, :7] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-30, -30.0, 30.0])
    x[0, 80:] = x[0, :7]
    return (x.to(torch.bfloat16),)


def special_floats(n: int) -> torch.Tensor:
    """``n`` floats: specials that bf16/fp16 rounding must get right, among random values."""
    bits = [0x7fc00000, 0xffc12345, 0x7f800001, 0x7f800000, 0xff800000,      # NaNs, +-inf
            0x00000001, 0x807fffff, 0x007f8000, 0x007fffff, 0x00008000,      # denormals, ties among them
            0x3f808000, 0x3f818000, 0xbf808000, 0x3f80c000, 0x3f807fff,      # ties to even, near ties
            0x7f7fffff, 0x7f7f8000, 0x00000000, 0x80000000, 0x38800000]      # rounds to inf, zeros, fp16 edge
    x = torch.randn(n) * 4
    for k in range(0, n, 37):   # specials in the vector body and in the tails
        x[k: k + len(bits)] = torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)[: n - k]
    return x


def assert_bitwise(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan)
    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[expected.dtype]
    assert torch.equal(actual[~nan].view(bits), expected[~nan].view(bits)), \
        (actual[~nan] != expected[~nan]).nonzero()[:5]


CASES = {
    "to_bf16_1d": (to_bf16, lambda: (special_floats(3 * BLOCK + 11),)),
    "to_bf16_parallel": (to_bf16, lambda: (special_floats(40000 + 7),)),
    "to_bf16_wide": (to_bf16, lambda: (special_floats(3 << 16),)),
    "to_f16_rows": (to_f16, lambda: (special_floats(7 * 83).reshape(7, 83),)),
    "scaled_bf16": (scaled_bf16, lambda: (randn(9, 100, dtype=torch.bfloat16), torch.rand(9, 1) + 0.5)),
    "max_normalized": (max_normalized, lambda: (randn(6, 1000 + 13, dtype=torch.bfloat16),
                                                 randn(1000 + 13, dtype=torch.bfloat16))),
    "sliced_rows": (sliced_rows, lambda: (special_floats(64 * 700).reshape(64, 700).to(torch.bfloat16),)),
    "sliced_max_normalized": (sliced_max_normalized,
                              lambda: (special_floats(6 * 3 * 50).reshape(6, 3, 50) * 1e-37,)),
    "layer_norm_bf16": (layer_norm_bf16, lambda: (randn(5, 300, dtype=torch.bfloat16), randn(300, dtype=torch.bfloat16),
                                                   randn(300, dtype=torch.bfloat16))),
    "rmsnorm_bf16": (rmsnorm, lambda: (randn(7, 515, dtype=torch.bfloat16), randn(515, dtype=torch.bfloat16))),
    "half_chain": (half_chain, lambda: (randn(5, 77, dtype=torch.float16), randn(77, dtype=torch.float16))),
    "float_only": (float_only, lambda: (randn(8, 64), randn(64))),
    "transposed": (transposed, lambda: (randn(64, 48, dtype=torch.bfloat16),)),
    "transposed_like_input": (transposed_like_input, lambda: (randn(64, 48, dtype=torch.bfloat16),)),
    "gelu_bf16": (gelu_bf16, _gelu_rows),
    "gelu_from_bf16": (gelu_from_bf16, _gelu_rows),
    "tanh_gelu_bf16": (tanh_gelu_bf16, lambda: (randn(4, 64, dtype=torch.bfloat16),)),
}


# one op each over bf16 and fp16: eager computes each in float and rounds once, as surge
ELEMENTWISE = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "maximum": torch.maximum, "minimum": torch.minimum,
    "neg": lambda a, b: -a, "abs": lambda a, b: a.abs(), "relu": lambda a, b: torch.relu(a),
    "sqrt": lambda a, b: a.sqrt(), "reciprocal": lambda a, b: a.reciprocal(),
    "where_lt": lambda a, b: torch.where(a < b, a, b), "where_ne": lambda a, b: torch.where(a != b, a, b * 2),
    "where_isnan": lambda a, b: torch.where(a.isnan() | (b >= 1), b, a),
    "mask_to_float": lambda a, b: (a > b).to(a.dtype) + a,
    "clamp": lambda a, b: a.clamp(-0.5, 0.5), "to_other_half": lambda a, b: a.to(torch.float16 if a.dtype ==
                                                                                 torch.bfloat16 else torch.bfloat16),
}
HALVES = {"bf16": torch.bfloat16, "f16": torch.float16}


def elementwise_inputs(dtype):
    a = special_floats(3 * 53).reshape(3, 53).to(dtype)
    b = torch.randn(53).to(dtype)
    b[7] = float("nan")
    b[8] = 0.0
    return a, b


for _op, _fn in ELEMENTWISE.items():
    for _half, _dtype in HALVES.items():
        CASES[f"op_{_op}_{_half}"] = (_fn, (lambda d: lambda: elementwise_inputs(d))(_dtype))


@pytest.fixture(scope="module")
def compiled():
    return compile_cases(CASES)


@pytest.mark.parametrize("half", sorted(HALVES))
@pytest.mark.parametrize("op", sorted(ELEMENTWISE))
def test_each_vector_op_matches_eager_bitwise(compiled, op, half):
    name = f"op_{op}_{half}"
    a, b = CASES[name][1]()
    assert_bitwise(compiled[name](a, b), ELEMENTWISE[op](a, b))
    assert VECTOR_LOOP in compiled[name].cpp_source


@pytest.mark.parametrize("name", ["to_bf16_1d", "to_bf16_parallel", "to_f16_rows"])
def test_conversions_of_special_values_match_eager_bitwise(compiled, name):
    fn, make_inputs = CASES[name]
    (x,) = make_inputs()
    assert_bitwise(compiled[name](x), fn(x))
    clean = torch.randn(x.shape) * 100     # no specials: the vector loop's own results stand
    assert_bitwise(compiled[name](clean), fn(clean))
    tiny = torch.randn(x.shape) * 1e-39    # all denormal: every block is redone
    assert_bitwise(compiled[name](tiny), fn(tiny))


def test_all_bf16_rounding_cases_of_three_exponents(compiled):
    # every low half of the mantissa bits for a normal and two denormal exponents,
    # odd and even kept bits alike
    low = torch.arange(0, 1 << 16, dtype=torch.int64)
    x = torch.cat([(0x3f800000 + low), (0x00000000 + low), (0x80010000 + low)]).to(torch.int32).view(torch.float32)
    assert_bitwise(compiled["to_bf16_wide"](x), to_bf16(x))


def test_row_epilogues_match_eager_bitwise(compiled):
    for name in ("scaled_bf16", "max_normalized"):
        fn, make_inputs = CASES[name]
        for _ in range(2):
            inputs = make_inputs()
            assert_bitwise(compiled[name](*inputs), fn(*inputs))
    x, w = CASES["max_normalized"][1]()
    x[1, 5] = float("nan")          # a NaN row: NaN everywhere in it, as in eager
    x[2, 17] = float("inf")
    w[40] = float("-inf")
    w[100:300] = w[100:300] * 1e-38   # denormal products, rounded to bf16 in the store
    assert_bitwise(compiled["max_normalized"](x, w), max_normalized(x, w))


def test_norms_with_float_statistics_match_eager(compiled):
    # their row sums run in another order than eager's: an ulp of bf16 apart at most
    for name in ("layer_norm_bf16", "rmsnorm_bf16"):
        fn, make_inputs = CASES[name]
        inputs = make_inputs()
        inputs[0][2, 3] = float("nan")
        assert_matches_eager(fn, compiled[name], *inputs, atol=2e-2, rtol=1e-2)
        assert VECTOR_LOOP in compiled[name].cpp_source


def test_half_ops_match_eager_bitwise(compiled):
    x, y = CASES["half_chain"][1]()
    x[0, :20] = float("nan")
    y[3] = float("nan")
    x[1, 5:9] = torch.tensor([float("inf"), -float("inf"), 6e-8, -6e-8], dtype=torch.float16)
    assert_bitwise(compiled["half_chain"](x, y), half_chain(x, y))


def test_non_contiguous_and_broadcast_inputs_match_eager(compiled):
    x = special_floats(64 * 48).reshape(64, 48).to(torch.bfloat16)
    assert_bitwise(compiled["transposed"](x), transposed(x))
    out = compiled["transposed_like_input"](x)
    assert_bitwise(out, transposed_like_input(x))
    assert out.stride() == transposed_like_input(x).stride()
    fn, make_inputs = CASES["scaled_bf16"]
    x, scale = make_inputs()
    scale[4, 0] = float("nan")
    assert_bitwise(compiled["scaled_bf16"](x, scale), fn(x, scale))


def test_loop_nests_of_several_dims_match_eager_bitwise(compiled):
    for name in ("sliced_rows", "sliced_max_normalized"):
        fn, make_inputs = CASES[name]
        (x,) = make_inputs()
        assert_bitwise(compiled[name](x), fn(x))
        clean = torch.randn(x.shape).to(x.dtype)   # no specials: the vector loop's results stand
        assert_bitwise(compiled[name](clean), fn(clean))
        assert VECTOR_LOOP in compiled[name].cpp_source
    assert "x1_tail" in compiled["sliced_rows"].cpp_source and "r1_tail" in compiled["sliced_max_normalized"].cpp_source


def test_which_loops_get_a_vector_form(compiled):
    for name in ("to_bf16_1d", "to_f16_rows", "scaled_bf16", "max_normalized", "half_chain",
                 "transposed_like_input"):
        assert VECTOR_LOOP in compiled[name].cpp_source, name
    epilogue = compiled["max_normalized"].cpp_source
    assert "surge_v_round_bf16(" in epilogue and "surge_v_store_bf16(" in epilogue
    assert "_mm512_set1_ps(" in compiled["scaled_bf16"].cpp_source, "the per-row scale is broadcast"
    assert f"xb += {BLOCK}" in compiled["to_bf16_parallel"].cpp_source
    # float-only loops stay with GCC; an op without a vector form keeps the scalar loop
    assert VECTOR_LOOP not in compiled["float_only"].cpp_source
    assert VECTOR_LOOP not in compiled["tanh_gelu_bf16"].cpp_source
    assert VECTOR_LOOP not in compiled["transposed"].cpp_source
    assert "__mmask16 special" not in compiled["to_f16_rows"].cpp_source, "fp16 rounding needs no fallback check"
    # <immintrin.h> costs the compiler ~0.3 s: only modules with vector loops include it
    assert "#include <immintrin.h>" in compiled["to_f16_rows"].cpp_source
    assert "#include <immintrin.h>" not in compiled["float_only"].cpp_source


def test_vector_path_is_compiled_in_on_cpus_with_avx512_bf16():
    with open("/proc/cpuinfo") as f:
        flags = next((line.split() for line in f if line.startswith("flags")), [])
    if "avx512_bf16" not in flags:
        pytest.skip("the CPU has no AVX512-BF16: the scalar loops run alone")
    out = subprocess.run([DEFAULT_CXX, *[f for f in COMPILE_FLAGS if f != "-shared"], "-dM", "-E", "-x", "c++", "-"],
                         input=PRELUDE + HELPERS, capture_output=True, text=True, check=True).stdout
    assert "#define SURGE_VEC16 1" in out


def test_gelus_normal_cdf_in_lanes_equals_the_scalar_formula_bitwise(compiled):
    """GELU's one-formula normal CDF (codegen/fused_forms.py) in vector lanes gives the
    scalar loop's bits: the tail columns repeat the first ones (specials included)."""
    (x,) = _gelu_rows()
    for name, fn, bits in (("gelu_bf16", gelu_bf16, torch.int16), ("gelu_from_bf16", gelu_from_bf16, torch.int32)):
        assert "surge_v_normal_cdf(" in compiled[name].cpp_source, name
        got = compiled[name](x)
        assert torch.equal(got[:, 80:].view(bits), got[:, :7].view(bits)), name
        # eager's GELU of +inf is NaN (its erf formula); surge's, like torch.compile's, is +inf
        finite = x != float("inf")
        torch.testing.assert_close(got[finite], fn(x)[finite], equal_nan=True)
        assert bool((got[~finite] == float("inf")).all())
