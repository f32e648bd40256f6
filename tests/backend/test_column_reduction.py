"""Column reductions on the Triton backend: kernels that read along x tile x wide, and
GPU column reductions with too few column tiles are split with partials laid out
[chunks, columns] (lowering/split_reduction.py).

The split is for CUDA only; these tests switch it on for CPU tensors and lower the
split threshold (an option) so that small inputs (fast in Triton's interpreter) split.
"""
import copy

import pytest
import torch

from surge.codegen.triton.module import generate_module
from surge.lowering import split_reduction
from surge.lowering.ir import Layout
from surge.lowering.split_reduction import plan_column_split, reads_along_kept_dims
from surge.lowering.tensor import LazyTensor
from surge.runtime import autotune
from surge.options import CompileConfig
from surge.schedule.groups import KernelGroup
from surge.tools.workloads import LayerNormMLP

from .helpers import assert_outputs_match, compile_fn, schedule_of, triton_target_here


THRESHOLD = 128   # over the MLP's rows of 64: only the column reductions split
SMALL_SPLITS = CompileConfig(split_reduction_min_elements=THRESHOLD)


@pytest.fixture
def gpu_like_splits(monkeypatch):
    monkeypatch.setattr(split_reduction, "splits_columns", lambda target: True)


def _kernel_meta(fn, *inputs) -> list:
    _, kernels = generate_module(schedule_of(fn, *inputs), triton_target_here(), CompileConfig())
    return [(k.column, k.persistent, k.rnumel) for k in kernels.values()]


def test_sum_over_rows_is_a_column_kernel_and_over_columns_is_not():
    x = torch.randn(300, 64)
    assert _kernel_meta(lambda t: t.sum(0), x) == [(True, False, 300)]   # loops over r
    assert _kernel_meta(lambda t: t.sum(1), x) == [(False, True, 64)]
    assert _kernel_meta(lambda t: t.sum(0), torch.randn(16, 64)) == [(True, True, 16)]   # short: one tile


def test_column_configs_tile_neighbouring_columns():
    looped = autotune.candidate_configs(dict(xnumel=4096, rnumel=512, reduction=True, persistent=False,
                                             column=True), interpret=False)
    assert looped[0] == dict(XBLOCK=64, RBLOCK=32, num_warps=4, num_stages=1)
    assert all(c["XBLOCK"] >= 32 for c in looped)
    short = autotune.column_default(4096, 16, persistent=True)
    assert short["RBLOCK"] == 16 and short["XBLOCK"] >= 32


def test_column_split_plan():
    # mlp_train's bias gradient on an H200: 4096 columns are 64 tiles -> 16 chunks of 512 rows
    assert plan_column_split(4096, 8192) == (16, 512)
    assert plan_column_split(65536, 8192) is None      # column tiles enough
    assert plan_column_split(4096, 100) is None        # columns too short to split
    # a batch norm's statistics over channels-last (16, 64, 56, 56): one column tile; both
    # stages read about sqrt(50176) rows per column
    assert plan_column_split(64, 16 * 56 * 56) == (224, 224)
    assert plan_column_split(512, 16 * 7 * 7) == (8, 98)     # 8 tiles: chunks of 64 elements a column or more
    assert plan_column_split(8, 32, threshold=64) == (4, 8)   # the threshold sets the smallest chunk


def _strided(shape, stride, name: str = "buf") -> LazyTensor:
    return LazyTensor.of_buffer(name, Layout(tuple(shape), tuple(stride), 0), torch.float32, "cpu")


def test_a_column_reduction_is_told_by_the_memory_order_of_its_loads():
    matrix = _strided((8192, 4096), (4096, 1))
    assert reads_along_kept_dims(matrix, [0]) and not reads_along_kept_dims(matrix, [1])
    assert not reads_along_kept_dims(_strided((8192, 4096), (1, 8192)), [0])   # a transposed view
    cube = _strided((4, 8, 16), (128, 16, 1))
    assert reads_along_kept_dims(cube, [0, 1]) and reads_along_kept_dims(cube, [1])
    assert not reads_along_kept_dims(cube, [0, 2])
    # (N, C, H, W) reduced over N, H and W: channels-last reads along C, contiguous does not
    assert reads_along_kept_dims(_strided((16, 64, 56, 56), (200704, 1, 3584, 64)), [0, 2, 3])
    assert not reads_along_kept_dims(_strided((16, 64, 56, 56), (200704, 3136, 56, 1)), [0, 2, 3])


CASES = {
    "sum0": (lambda x: x.sum(0), lambda: (torch.randn(256, 24),)),
    "sum0_several_tiles": (lambda x: x.sum(0), lambda: (torch.randn(40, 130),)),
    "mean0_bf16": (lambda x: x.mean(0), lambda: (torch.randn(256, 24).bfloat16(),)),
    "sum_leading_two": (lambda x: x.sum((0, 1)), lambda: (torch.randn(16, 16, 12),)),
    "var0": (lambda x: x.var(0), lambda: (torch.randn(250, 20) * 2 + 3,)),
    "var0_far_from_zero": (lambda x: x.var(0, correction=0), lambda: (torch.randn(256, 20) + 1e3,)),
    "argmax0": (lambda x: x.argmax(0), lambda: (torch.randn(256, 20),)),
    "amin0_odd": (lambda x: x.amin(0), lambda: (torch.randn(253, 20),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_column_reductions_match_eager(name, gpu_like_splits):
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    schedule = schedule_of(fn, *inputs, config=SMALL_SPLITS)
    assert len([s for s in schedule.steps if isinstance(s, KernelGroup)]) >= 2, str(schedule)   # split in two
    expected = fn(*inputs)
    actual = compile_fn(fn, *inputs, split_reduction_min_elements=THRESHOLD)(*inputs)
    if name == "mean0_bf16":
        torch.testing.assert_close(actual[0] if isinstance(actual, (list, tuple)) else actual, expected,
                                   atol=1e-2, rtol=1e-2)
    else:
        assert_outputs_match(actual, expected)


def test_layernorm_mlp_gradients_with_split_column_reductions(gpu_like_splits):
    import surge

    torch.manual_seed(0)
    model = LayerNormMLP(64, 1)
    reference = copy.deepcopy(model)
    x = torch.randn(256, 64)
    compiled = surge.compile(model, backend="triton", options={"graph_cache": False,
                                                               "split_reduction_min_elements": THRESHOLD})
    compiled(x).square().mean().backward()
    reference(x).square().mean().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)


def test_per_row_operands_do_not_outvote_the_column_reads():
    # a LayerNorm weight's gradient: sum over tokens of dy * (x - mean[t]) * rstd[t] * s[t]
    dy, x = _strided((512, 64), (64, 1), "dy"), _strided((512, 64), (64, 1), "x")
    stats = [_strided((512, 1), (1, 1), f"stat{k}") for k in range(3)]

    def load(idx):
        from surge.lowering.values import Op

        v = Op("sub", [x.load(idx), stats[0].load([idx[0], 0])], torch.float32)
        for s in stats[1:]:
            v = Op("mul", [v, s.load([idx[0], 0])], torch.float32)
        return Op("mul", [dy.load(idx), v], torch.float32)
    assert reads_along_kept_dims(LazyTensor((512, 64), torch.float32, "cpu", loader=load), [0])
