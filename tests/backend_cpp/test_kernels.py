"""Generated C++ kernels equal eager on fresh inputs: reductions, views, gathers, dtypes,
NaN/inf, odd sizes, non-contiguous and broadcast inputs, zero-size tensors.

All programs build into one library (one compiler run); each test checks one program.
"""
import pytest
import torch
import torch.nn.functional as F

from .helpers import assert_matches_eager, compile_cases, randn

NAN, INF = float("nan"), float("inf")


def _special(*shape):
    """Random values with NaN, +inf and -inf sprinkled in."""
    x = randn(*shape)
    flat = x.view(-1)
    picks = torch.randperm(flat.numel())[:max(3, flat.numel() // 8)]
    flat[picks[0::3]] = NAN
    flat[picks[1::3]] = INF
    flat[picks[2::3]] = -INF
    return x


def _math_specials():
    """NaN, infinities, signed zeros, and magnitudes where vector math takes its slow paths."""
    edge = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 1e-30, -1e-30, 88.7, 88.8, -87.3, -103.9, -104.5,
                         9.0, -9.5, 1e4, -1e4, 1e6, 3e7, -1e30, 1e38, 1.5707964, 3.1415927, 0.625, -0.55])
    return (torch.cat([edge, randn(64) * 4, edge.flip(0)]),)


def _r(*shape, dtype=torch.float32):
    return lambda: (randn(*shape, dtype=dtype),)


CASES = {
    # reductions, row (persistent-like) and column, whole tensor, on odd sizes
    "sum": (lambda x: x.sum(-1), _r(6, 13)),
    "mean_keepdim": (lambda x: x.mean(-1, keepdim=True), _r(6, 13)),
    "max_min": (lambda x: (x.amax(-1), x.amin(0)), _r(6, 13)),
    "argmax_argmin": (lambda x: (x.argmax(-1), x.argmin(0), x.argmax()), _r(6, 13)),
    "prod": (lambda x: (x * 0.1 + 1).prod(-1), _r(6, 13)),
    "any_all": (lambda x: ((x > 1).any(-1), (x > -3).all(-1)), _r(6, 13)),
    "var_std": (lambda x: (x.var(-1), x.std(0, correction=0)), _r(6, 13)),
    "logsumexp": (lambda x: torch.logsumexp(x, -1), _r(6, 13)),
    "log_softmax_dim0": (lambda x: torch.log_softmax(x, 0), _r(6, 13)),
    "whole_tensor": (lambda x: x.sum() + x.max(), _r(7, 11)),
    "big_rows_parallel": (lambda x: torch.softmax(x, -1) * x.var(-1, keepdim=True), _r(257, 301)),
    "big_single_row_parallel": (lambda x: (x.sum(), x.amax(), x.var()), _r(100003)),
    "normalize": (lambda x: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True) + 1e-5).sqrt(), _r(6, 40)),
    # views and data movement
    "permute_reshape": (lambda x: x.permute(1, 0).reshape(2, -1) * 2, _r(6, 8)),
    "transpose_contiguous_add": (lambda x: x.t().contiguous() + x.t(), _r(6, 8)),
    "expand_slice_select": (lambda x: x[:, 1:7:2].unsqueeze(0).expand(3, 6, 3) + x[2, :3], _r(6, 8)),
    "cat": (lambda x: torch.cat([x, x * 2, x[:2]], 0), _r(6, 8)),
    "pad": (lambda x: F.pad(x, (1, 2, 0, 3), value=-1.5), _r(6, 8)),
    "flip_repeat": (lambda x: x.flip(0).repeat(2, 1), _r(6, 8)),
    "split_stack": (lambda x: torch.stack(x.split(4, dim=1), 0).sum(0), _r(6, 8)),
    # inputs that are not contiguous, and broadcasts
    "non_contiguous_input": (lambda x: torch.sin(x) * 2 + x.sum(-1, keepdim=True),
                             lambda: (randn(9, 14)[:, ::2],)),
    "transposed_input": (lambda x: (x * x).sum(0), lambda: (randn(13, 7).t(),)),
    "broadcast_inputs": (lambda x, b, c: x * b + c, lambda: (randn(5, 1, 7), randn(3, 1), randn(7))),
    "scalar_tensor_input": (lambda x, s: x * s + s, lambda: (randn(4, 5), randn(()))),
    # zero-size tensors
    "zero_size": (lambda x, y: (x * 2 + 1, torch.cat([x, y], 0)), lambda: (randn(0, 5), randn(3, 5))),
    # gathers
    "gathers": (lambda t, i, x: F.embedding(i[:, 0], t) + t[i[:, 1].flip(0) % 5] + x.gather(1, i % 3),
                lambda: (randn(10, 3), torch.randint(0, 10, (4, 3)), randn(4, 3))),
    "negative_index": (lambda t, i: t[i], lambda: (randn(7, 2), torch.tensor([-1, -7, 3]))),
    "iota_constants": (lambda x: x + torch.arange(8, dtype=torch.float32) * 0.5 + torch.full((8,), 2.0),
                       _r(3, 8)),
    # dtypes: fp16/bf16 are computed in fp32; integers and bools
    "float16": (lambda x, y: torch.softmax(x * y, -1).to(torch.float32) + (x - y).sum(-1, keepdim=True),
                lambda: (randn(5, 7, dtype=torch.float16), randn(5, 7, dtype=torch.float16))),
    "bfloat16": (lambda x, y: (F.gelu(x) * y, (x * y).sum(-1)),
                 lambda: (randn(5, 7, dtype=torch.bfloat16), randn(5, 7, dtype=torch.bfloat16))),
    "float64": (lambda x: torch.tanh(x).exp() / x.sum(-1, keepdim=True), _r(5, 7, dtype=torch.float64)),
    "int32": (lambda x, y: torch.maximum(x * 3 - y, y).sum(-1, dtype=torch.int32),
              lambda: (torch.randint(-9, 9, (5, 7), dtype=torch.int32), torch.randint(-9, 9, (5, 7), dtype=torch.int32))),
    "int_division": (lambda x, y: (torch.div(x, y, rounding_mode="floor"), torch.remainder(x, y), x // 3),
                     lambda: (torch.randint(-20, 20, (6, 5)), torch.randint(1, 7, (6, 5)) * (1 - 2 * torch.randint(0, 2, (6, 5))))),
    "bool": (lambda x, y: (x & ~y) | (x ^ y), lambda: (torch.rand(5, 7) > 0.5, torch.rand(5, 7) > 0.5)),
    # NaN and inf propagate as in eager
    "nan_pointwise": (lambda x, y: (torch.maximum(x, y), torch.minimum(x, y), torch.relu(x), x.clamp(-1, 1),
                                    F.hardtanh(y), torch.sign(x), torch.isnan(x), torch.isinf(y), x.clamp(min=0.5)),
                      lambda: (_special(6, 9), _special(6, 9))),
    "nan_reductions": (lambda x: (x.amax(-1), x.amin(-1), x.sum(-1), x.argmax(-1), x.argmin(-1),
                                  torch.softmax(x, -1), x.var(-1), x.max(-1).values),
                       lambda: (_special(7, 9),)),
    # glibc's vector math on the vectorized path: NaN/inf/-0.0 and large magnitudes as eager
    "math_specials": (lambda x: (torch.exp(x), torch.tanh(x), torch.sin(x), torch.cos(x), torch.erf(x),
                                 torch.sigmoid(x), torch.log(x.abs()), torch.expm1(x), torch.atan(x)),
                      _math_specials),
    "inf_rows": (lambda x: (x.amax(-1), torch.logsumexp(x, -1), x.argmax(-1)),
                 lambda: (torch.tensor([[-INF, -INF, -INF], [INF, 1.0, -INF], [NAN, INF, 2.0]]),)),
}

TOL = {"float16": dict(atol=2e-2, rtol=2e-2), "bfloat16": dict(atol=3e-2, rtol=3e-2),
       "big_single_row_parallel": dict(atol=1e-3, rtol=1e-4)}


@pytest.fixture(scope="module")
def compiled():
    return compile_cases(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name):
    fn, make_inputs = CASES[name]
    assert_matches_eager(fn, compiled[name], *make_inputs(), **TOL.get(name, {}))


def test_all_programs_shared_one_compiler_run(compiled):
    assert sum(c.compiled for c in compiled.values()) in (0, len(compiled))
    assert all(c.kernel_names for c in compiled.values())


def test_large_kernels_are_parallel_and_vectorized(compiled):
    src = compiled["big_rows_parallel"].cpp_source
    assert "#pragma omp parallel for" in src and "#pragma omp simd reduction(+:" in src
    single = compiled["big_single_row_parallel"].cpp_source
    # a single huge row is split (surge/lowering/split_reduction.py): its chunks run in parallel
    assert "#pragma omp parallel for schedule(static)" in single.split("_1(")[0]
    small = compiled["sum"].cpp_source
    assert "omp parallel" not in small, "tiny kernels run on one thread"
