"""The CPU refinement of a schedule: column sums join the row kernel of their operands.

``fuse_column_reductions`` (surge/schedule/column_fusion.py) is applied by the C++ code
generator only; these tests check the pass itself on loop graphs (no compiler run):
which sums move, which stay, what stops being stored, and that the shared schedule
(what the Triton backend generates) is left as it was.
"""
import torch

from surge.schedule.column_fusion import MAX_COLUMNS, fuse_column_reductions

from .helpers import randn, schedule_of


def layer_norm_gelu_backward(x, w, b, gy):
    """The backward of GELU(LayerNorm(x)) written out: a row kernel (the input gradient)
    and three sums over rows (weight, bias, and the input gradient's column sum, which
    is the bias gradient of a Linear before it)."""
    mean = x.mean(-1, keepdim=True)
    xm = x - mean
    rstd = torch.rsqrt((xm * xm).mean(-1, keepdim=True) + 1e-5)
    xhat = xm * rstd
    y = xhat * w + b
    dgelu = 0.5 * (1 + torch.erf(y * 0.7071067811865476)) + y * torch.exp(-0.5 * y * y) * 0.3989422804014327
    dy = gy * dgelu
    dxhat = dy * w
    dx = rstd * (dxhat - dxhat.mean(-1, keepdim=True) - xhat * (dxhat * xhat).mean(-1, keepdim=True))
    return dx, (dy * xhat).sum(0), dy.sum(0), dx.sum(0)


def _ln_inputs(rows=48, cols=40):
    return randn(rows, cols), randn(cols), randn(cols), randn(rows, cols)


def _roles(schedule):
    return [{n.name: k.role(n) for n in k.nodes} for k in schedule.kernels]


def test_column_sums_join_the_row_kernel_and_its_intermediates_stay_in_registers():
    shared = schedule_of(layer_norm_gelu_backward, *_ln_inputs())
    before = [str(s) for s in shared.steps]
    refined = fuse_column_reductions(shared)
    assert len(shared.kernels) > 1
    (kernel,) = refined.kernels
    roles = _roles(refined)[0]
    assert sorted(r for r in roles.values() if r == "column") == ["column"] * 3
    # the kernel stores the input gradient and the three sums, nothing else
    assert len(kernel.stores) == 4
    assert refined.memory.allocations == 4 and refined.memory.reuses == 0
    # the shared schedule is not modified (the Triton backend generates it as it is)
    assert [str(s) for s in shared.steps] == before
    assert not any(k.columns for k in shared.kernels)


def test_three_dim_rows_reduce_over_two_x_dims():
    fn = lambda x, w, gy: ((gy * w * x).sum((0, 1)), (gy * x).sum(-1))  # noqa: E731
    shared = schedule_of(fn, randn(3, 5, 40), randn(40), randn(3, 5, 40))
    refined = fuse_column_reductions(shared)
    assert len(refined.kernels) == 1
    assert "column" in _roles(refined)[0].values()


def test_sums_of_inputs_alone_and_non_sums_stay_apart():
    # nothing shared with a row kernel: no host
    fn = lambda x, y: (x.sum(-1), y.sum(0))  # noqa: E731
    s = schedule_of(fn, randn(32, 40), randn(32, 40))
    assert fuse_column_reductions(s) is s
    # a column max is not a sum: it keeps its kernel
    fn = lambda x: ((x * 2).sum(-1), (x * 2).amax(0))  # noqa: E731
    s = schedule_of(fn, randn(32, 40))
    assert fuse_column_reductions(s) is s


def test_a_sum_of_a_later_extern_result_is_not_moved_before_it():
    # the column sum reads x @ w, which runs after the row kernel
    def fn(x, w):
        rows = (x * x).sum(-1, keepdim=True)
        y = (x / rows) @ w
        return y, (y * x).sum(0)
    s = schedule_of(fn, randn(32, 40), randn(40, 40))
    refined = fuse_column_reductions(s)
    first = refined.kernels[0]
    assert not first.columns
    assert any(k.columns for k in refined.kernels[1:]) or refined is s


def test_transposed_operands_are_not_gathered_into_a_row_kernel():
    # the sum reads xt across the row kernel's rows (a transposed read)
    fn = lambda x, xt: ((x * x).sum(-1), (x * xt).sum(0))  # noqa: E731
    s = schedule_of(fn, randn(40, 40), randn(40, 40).t())
    refined = fuse_column_reductions(s)
    assert all(not k.columns for k in refined.kernels)


def test_too_many_columns_stay_a_column_kernel():
    cols = MAX_COLUMNS + 16
    s = schedule_of(layer_norm_gelu_backward, *_ln_inputs(rows=2, cols=cols))
    assert fuse_column_reductions(s) is s


def test_an_epilogue_reading_the_sum_keeps_it_in_its_kernel():
    fn = lambda x: ((x * 3).sum(-1), (x * 3).sum(0).sigmoid())  # noqa: E731
    s = schedule_of(fn, randn(32, 40))
    assert any(len(k.nodes) == 2 for k in s.kernels)    # the column sum and its sigmoid
    assert fuse_column_reductions(s) is s


def test_a_sum_moves_to_a_later_row_kernel_when_nothing_reads_it_before():
    fn = lambda x, w: ((x * w).sum(0), (x * w).sum(-1))  # noqa: E731
    s = schedule_of(fn, randn(32, 40), randn(40))
    assert [k.r_ranges for k in s.kernels] == [(32,), (40,)]   # the column sum comes first
    refined = fuse_column_reductions(s)
    assert len(refined.kernels) == 1 and "column" in _roles(refined)[0].values()


def test_float64_and_bfloat16_sums_are_candidates():
    for dtype in (torch.float64, torch.bfloat16):
        inputs = [t.to(dtype) for t in _ln_inputs()]
        refined = fuse_column_reductions(schedule_of(layer_norm_gelu_backward, *inputs))
        assert len(refined.kernels) == 1, dtype


def test_column_sums_do_not_join_a_column_kernel():
    # the first kernel sums x over rows (its r loop is strided: a column-layout kernel);
    # the second sum reads y.t() along that kernel's r loop and its result along x,
    # so it would fit as a column member, but the kernel would lose its column layout
    def fn(x, y):
        s = x.sum(0)
        return s, (y.t() * s).sum(1)
    s = schedule_of(fn, randn(48, 40), randn(40, 48))
    assert [k.r_ranges for k in s.kernels] == [(48,), (40,)]
    assert all(not k.columns for k in fuse_column_reductions(s).kernels)
