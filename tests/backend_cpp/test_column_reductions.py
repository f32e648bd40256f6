"""Column reductions (r strided, x contiguous: sums over the batch dim) and matmul gradients.

Column reductions run a block of rows per iteration with per-row accumulator arrays
(surge/codegen/cpp/column_reduction.py); these programs check them on odd sizes
(blocks that do not divide the columns, fewer columns than a block), several r dims,
non-contiguous inputs, NaN/inf, narrow dtypes, reductions that feed a second stage or
a pointwise epilogue, and the gradients of a Linear+LayerNorm+GELU stack.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import surge
from surge.lowering.ir import TensorArg

from .helpers import assert_matches_eager, compile_cases, randn

NAN, INF = float("nan"), float("inf")


def _special(*shape):
    """Random values with NaN, +inf and -inf in a few places (a few columns stay finite)."""
    x = randn(*shape)
    flat = x.view(-1)
    picks = torch.randperm(flat.numel())[:max(3, flat.numel() // 40)]
    flat[picks[0::3]] = NAN
    flat[picks[1::3]] = INF
    flat[picks[2::3]] = -INF
    return x


def _r(*shape, dtype=torch.float32):
    return lambda: (randn(*shape, dtype=dtype),)


def grad_wrt_weight_and_bias(gy, x, w):
    """The backward of a Linear: d = gy * sigmoid(x @ w) feeds two matmuls and a column sum."""
    d = gy * torch.sigmoid(x @ w)
    return d @ w.t(), d.t() @ x, d.sum(0)


CASES = {
    "sum0_odd": (lambda x: x.sum(0), _r(37, 67)),                     # 64-row block + a 3-row tail
    "sum0_narrow": (lambda x: x.sum(0), _r(300, 3)),                  # fewer columns than a block
    "sum0_wide": (lambda x: x.sum(0), _r(33, 200)),
    "sum_two_r_dims": (lambda x: x.sum((0, 1)), _r(5, 7, 70)),
    "mean_keepdim0": (lambda x: x.mean(0, keepdim=True), _r(41, 130)),
    "max0_special": (lambda x: x.amax(0), lambda: (_special(50, 70),)),
    "min0_special": (lambda x: x.amin(0), lambda: (_special(50, 70),)),
    "sum0_special": (lambda x: x.sum(0), lambda: (_special(50, 70),)),
    "prod0": (lambda x: (x * 0.1 + 1).prod(0), _r(20, 66)),
    "any_all0": (lambda x: ((x > 1.5).any(0), (x > -2).all(0)), _r(40, 67)),
    "sum0_of_sliced": (lambda x: x[::2, 1:].sum(0), _r(40, 131)),     # non-contiguous input
    "sum0_of_product": (lambda x, y: (x * y).sum(0), lambda: (randn(60, 90), randn(90))),
    "sum0_bf16": (lambda x: x.sum(0), _r(64, 96, dtype=torch.bfloat16)),
    "softmax0": (lambda x: torch.softmax(x, dim=0), _r(45, 70)),     # max, then sum of exp, then a pointwise pass
    "normalize_columns": (lambda x: x / x.abs().sum(0, keepdim=True), _r(30, 100)),
    "row_and_column_sums": (lambda x: (x.sum(0), x.sum(1)), _r(70, 90)),
    "linear_backward": (grad_wrt_weight_and_bias, lambda: (randn(48, 40), randn(48, 32), randn(32, 40))),
}
TOL = {"sum0_bf16": dict(atol=2e-2, rtol=2e-2), "prod0": dict(atol=1e-5, rtol=1e-4),
       "linear_backward": dict(atol=1e-4, rtol=1e-4)}


@pytest.fixture(scope="module")
def compiled():
    return compile_cases(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name):
    fn, make_inputs = CASES[name]
    assert_matches_eager(fn, compiled[name], *make_inputs(), **TOL.get(name, {}))


@pytest.mark.parametrize("name", ["sum0_odd", "max0_special", "softmax0", "sum_two_r_dims"])
def test_column_reductions_run_blocks_of_columns(compiled, name):
    assert "xb += 64" in compiled[name].cpp_source


def test_row_reductions_keep_the_row_loop(compiled):
    source = compiled["row_and_column_sums"].cpp_source
    assert source.count("#pragma omp simd reduction(+:acc_") == 1   # the row sum: one row per iteration
    # the column sum of the same input is added up in that pass (column_sums.py), not in a kernel of its own
    assert source.count("xb += 64") == 0 and len(compiled["row_and_column_sums"].kernel_names) == 1


def test_matmul_operand_is_computed_once_and_read_transposed(compiled):
    """d feeds ``d @ w.t()``, ``d.t() @ x`` and ``d.sum(0)``: one kernel writes it, the
    second matmul reads it as a transposed view instead of a transposed copy."""
    c = compiled["linear_backward"]
    stored_2d = [n for step in c.schedule.kernels for n in step.stores
                 if tuple(c.schedule.graph.by_name[n].layout.shape) == (48, 40)]
    assert len(stored_2d) == 1
    d = stored_2d[0]
    views = [a for step in c.schedule.externs for a in step.buffer.args
             if isinstance(a, TensorArg) and a.buffer == d and a.layout is not None]
    assert [tuple(v.layout.stride) for v in views] == [(1, 40)]


class LinearNormGelu(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU())
                                      for _ in range(depth)])

    def forward(self, x):
        return self.layers(x)


def test_training_gradients_match_eager():
    """LayerNorm weight/bias and Linear bias gradients are column sums over the batch."""
    torch.manual_seed(0)
    model = LinearNormGelu(72, 2)
    ref = LinearNormGelu(72, 2)
    ref.load_state_dict(model.state_dict())
    compiled = surge.compile(model, backend="cpp", fullgraph=True)
    for seed in range(2):
        x = torch.randn(45, 72, generator=torch.Generator().manual_seed(seed))
        for m in (model, ref):
            m.zero_grad()
        compiled(x).square().mean().backward()
        ref(x).square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)
