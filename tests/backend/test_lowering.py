"""Lowering and code generation of op families: reductions, views, gathers, dtypes, indexing."""
import pytest
import torch
import torch.nn.functional as F

from surge.lowering.lower import lower_graph

from .helpers import aten_graph, assert_matches_eager, compile_fn, randn


def test_loop_ir_prints_readably():
    x, w = randn(4, 8), randn(8)
    graph, _ = lower_graph(aten_graph(lambda x, w: (x * w).sum(-1).exp(), x, w), [x, w])
    text = str(graph)
    assert "reduction[sum](i0 < 4 | r0 < 8)" in text
    assert "load(arg0, 8*i0 + r0)" in text and "load(arg1, r0)" in text
    assert "pointwise(i0 < 4)" in text and "exp(" in text


REDUCTIONS = {
    "sum": lambda x: x.sum(-1),
    "mean_keepdim": lambda x: x.mean(-1, keepdim=True),
    "max_min": lambda x: (x.amax(-1), x.amin(0)),
    "argmax_argmin": lambda x: (x.argmax(-1), x.argmin(0)),
    "prod": lambda x: (x * 0.1 + 1).prod(-1),
    "any_all": lambda x: ((x > 1).any(-1), (x > -3).all(-1)),
    "var_std": lambda x: (x.var(-1), x.std(0, correction=0)),
    "logsumexp": lambda x: torch.logsumexp(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, 0),
    "whole_tensor": lambda x: x.sum() + x.max(),
}


@pytest.mark.parametrize("persistent_limit", [8192, 4], ids=["persistent", "looped"])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_match_eager(name, persistent_limit):
    fn = REDUCTIONS[name]
    c = compile_fn(fn, randn(6, 13), persistent_reduction_limit=persistent_limit)
    assert_matches_eager(fn, c, randn(6, 13), atol=1e-5, rtol=1e-5)


def test_reduction_epilogues_fuse_and_prologues_inline():
    # the normalisation reads x twice and the statistics once each: one kernel
    fn = lambda x: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True) + 1e-5).sqrt()  # noqa: E731
    c = compile_fn(fn, randn(6, 40), persistent_reduction_limit=8)
    assert len(c.kernel_names) == 1
    assert "for roffset in range(0, rnumel, RBLOCK):" in c.source
    assert_matches_eager(fn, c, randn(6, 40), atol=1e-5, rtol=1e-5)


VIEWS = {
    "permute_reshape": lambda x: x.permute(1, 0).reshape(2, -1) * 2,
    "transpose_contiguous_add": lambda x: x.t().contiguous() + x.t(),
    "expand_slice_select": lambda x: x[:, 1:7:2].unsqueeze(0).expand(3, 6, 3) + x[2, :3],
    "cat": lambda x: torch.cat([x, x * 2, x[:2]], 0),
    "pad": lambda x: F.pad(x, (1, 2, 0, 3), value=-1.5),
    "flip_repeat": lambda x: x.flip(0).repeat(2, 1),
    "split_stack": lambda x: torch.stack(x.split(4, dim=1), 0).sum(0),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_and_data_movement_match_eager(name):
    fn = VIEWS[name]
    c = compile_fn(fn, randn(6, 8))
    assert_matches_eager(fn, c, randn(6, 8))


def test_gathers_with_computed_indices():
    def fn(table, ids, x):
        return F.embedding(ids[:, 0], table) + table[ids[:, 1].flip(0) % 5] + x.gather(1, ids % 3)
    table, x = randn(10, 3), randn(4, 3)
    ids = torch.randint(-10, 10, (4, 3)).remainder(10)
    c = compile_fn(fn, table, ids, x)
    assert_matches_eager(fn, c, randn(10, 3), torch.randint(0, 10, (4, 3)), randn(4, 3))
    assert len(c.kernel_names) == 1


def test_negative_gather_indices_wrap():
    fn = lambda t, i: t[i]  # noqa: E731
    c = compile_fn(fn, randn(7, 2), torch.tensor([0, 1]))
    assert_matches_eager(fn, c, randn(7, 2), torch.tensor([-1, -7]))


def test_constants_and_iota():
    fn = lambda x: x + torch.arange(8, dtype=torch.float32) * 0.5 + torch.full((8,), 2.0)  # noqa: E731
    c = compile_fn(fn, randn(3, 8))
    assert len(c.kernel_names) == 1
    assert_matches_eager(fn, c, randn(3, 8))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.bool])
def test_dtypes(dtype):
    if dtype == torch.bool:
        fn = lambda x, y: (x & ~y) | (x ^ y)  # noqa: E731
        a, b = torch.rand(5, 7) > 0.5, torch.rand(5, 7) > 0.5
    elif dtype == torch.int32:
        fn = lambda x, y: torch.maximum(x * 3 - y, y).sum(-1, dtype=torch.int32)  # noqa: E731
        a, b = torch.randint(-9, 9, (5, 7), dtype=dtype), torch.randint(-9, 9, (5, 7), dtype=dtype)
    else:
        fn = lambda x, y: torch.softmax(x * y, -1).to(torch.float32) + (x - y).sum(-1, keepdim=True)  # noqa: E731
        a, b = randn(5, 7, dtype=dtype), randn(5, 7, dtype=dtype)
    c = compile_fn(fn, a, b)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype in (torch.float16, torch.bfloat16) else {}
    assert_matches_eager(fn, c, a, b, **tol)


def test_sixty_four_bit_indexing_when_sizes_need_it():
    """Sizes past 2**31 elements switch the kernel's index math to int64 (codegen only)."""
    big = torch.empty(2**16, 2**15 + 8, device="meta", dtype=torch.bfloat16)
    small = torch.empty(64, 32, device="meta")
    for x, bits in ((big, 64), (small, 32)):
        gm = aten_graph(lambda t: (t * 2).sum(-1), x)
        from surge.backends.triton import compile_aten_graph
        c = compile_aten_graph(gm, [x])
        meta = next(iter(c.module.KERNELS.values()))
        assert meta["index_bits"] == bits
        assert ("tl.program_id(0).to(tl.int64)" in c.source) == (bits == 64)


def test_unsupported_graph_input_names_the_problem():
    from surge.lowering.lower import LoweringError
    gm = aten_graph(lambda x: x + 1, randn(3))
    with pytest.raises(LoweringError, match="non-tensor graph input"):
        lower_graph(gm, [3])


def _gathers(fn, *inputs):
    """(indirect loads, direct loads) of the lowered graph's buffers."""
    from surge.lowering.ir import ComputedBuffer
    from surge.lowering.values import Load, walk

    graph, _ = lower_graph(aten_graph(fn, *inputs), list(inputs))
    loads = [v for b in graph.buffers if isinstance(b, ComputedBuffer) for v in walk(b.value) if isinstance(v, Load)]
    return sum(1 for ld in loads if ld.indirect), sum(1 for ld in loads if not ld.indirect)


def test_an_index_made_of_loop_indices_is_an_affine_load_not_a_gather():
    # HF's causal masks index positions with aranges: positions[b, kv] <= positions[b, q]
    def causal(positions):
        b = torch.arange(positions.shape[0], device=positions.device)[:, None, None]
        q = torch.arange(positions.shape[1], device=positions.device)[None, :, None]
        kv = torch.arange(positions.shape[1], device=positions.device)[None, None, :]
        return torch.where(positions[b, kv] <= positions[b, q], 0.0, float("-inf"))

    def shifted(x):   # an index that may be negative keeps the wrap-around gather
        return x[torch.arange(-3, 5, device=x.device)]

    positions = torch.randint(0, 50, (3, 16))
    assert _gathers(causal, positions) == (0, 2)
    assert _gathers(shifted, torch.randn(8))[0] == 1
    for fn, inputs in ((causal, (positions,)), (shifted, (torch.randn(8),))):
        c = compile_fn(fn, *inputs)
        torch.testing.assert_close(c(*inputs), fn(*inputs))
