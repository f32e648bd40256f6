"""Scheduling: which buffers fuse, which reach memory, and the memory plan."""
import torch

from surge.schedule.groups import KernelGroup

from .helpers import assert_matches_eager, compile_fn, randn, schedule_of


def test_siblings_reading_the_same_input_fuse_horizontally():
    fn = lambda x: (x.sin() + 1, x.cos() * 2, x.exp())  # noqa: E731
    s = schedule_of(fn, randn(4, 8))
    assert len(s.kernels) == 1 and len(s.kernels[0].stores) == 3


def test_transposed_read_of_a_kernel_result_is_not_fused():
    # y is read at another element than the one computed: it must go through memory
    def fn(x):
        y = x
        for _ in range(8):   # expensive enough to be computed once, not inlined twice
            y = (y * 0.5).sin() + x
        return y + y.t()
    s = schedule_of(fn, randn(8, 8))
    assert len(s.kernels) >= 2
    c = compile_fn(fn, randn(8, 8))
    assert_matches_eager(fn, c, randn(8, 8))


def test_intermediates_fused_away_are_never_allocated():
    fn = lambda x, w: torch.softmax(x * w, -1) * 3  # noqa: E731
    s = schedule_of(fn, randn(4, 16), randn(16))
    (kernel,) = s.kernels
    assert len(kernel.stores) == 1 and len(kernel.internal) >= 2
    assert s.memory.allocations == 1


def test_row_reduction_does_not_swallow_a_large_parallel_epilogue():
    # x - x.sum(): one row of 2**17 elements; the epilogue stays a parallel kernel
    fn = lambda x: x - x.sum()  # noqa: E731
    s = schedule_of(fn, torch.empty(2**17, device="meta"))
    assert len(s.kernels) == 3   # the sum split in two (partials, total), then the epilogue
    assert not s.kernels[-1].is_reduction
    small = schedule_of(fn, randn(64))
    assert len(small.kernels) == 1


def test_dead_buffers_are_freed_and_reused():
    # reductions along alternating dimensions cannot fuse: each one's vector dies
    # after the next, whose output reuses it
    def fn(x):
        a = torch.relu(x.sum(0)).unsqueeze(0) * x
        b = a.sum(1).unsqueeze(1) * x
        c = b.sum(0).unsqueeze(0) * x
        return c.sum(1)
    x = randn(8, 8)
    s = schedule_of(fn, x)
    plan = s.memory
    assert plan.reuses >= 1, str(plan)
    freed = [n for step in plan.steps for n in step.free_after]
    outputs = {o.arg.buffer for o in s.graph.outputs}
    assert not outputs & set(freed)
    c = compile_fn(fn, x)
    assert "# reuse" in c.source and "del " in c.source
    assert_matches_eager(fn, c, randn(8, 8), atol=1e-5, rtol=1e-5)


def test_no_dead_buffer_is_held_across_an_extern_call():
    # p dies at the first matmul; the second allocates its output through torch while
    # p would wait for q's kernel to reuse it: the peak would rise above eager's
    def fn(x, w1, w2):
        p = torch.softmax(x, -1)
        g = (p @ w1) @ w2
        return torch.softmax(g, -1)
    x, w1, w2 = randn(8, 8), randn(8, 16), randn(16, 8)
    s = schedule_of(fn, x, w1, w2)
    reused_later = {src for sm in s.memory.steps for _, src in sm.allocate if src}
    held = set()
    for step, sm in zip(s.steps, s.memory.steps):
        if step in s.externs:
            assert not held, (str(step), held)
        for name, src in sm.allocate:
            held.discard(src)
        held.update(n for n in sm.free_after if n in reused_later)
    c = compile_fn(fn, x, w1, w2)
    assert_matches_eager(fn, c, randn(8, 8), randn(8, 16), randn(16, 8), atol=1e-5, rtol=1e-5)


def test_schedule_prints_groups():
    s = schedule_of(lambda x: torch.softmax(x, -1), randn(4, 8))
    text = str(s)
    assert "kernel fused_" in text and "reduction" in text and "memory plan" in text
    assert all(isinstance(k, KernelGroup) for k in s.kernels)


def _layer_norm_backward(dy, w, x, res, mean, var):
    # the order a LayerNorm backward comes in: sum(dy * w) first, then xhat, which reads
    # nothing that sum reads, then the sum that needs both
    a = (dy * w).sum(-1, keepdim=True)
    xhat = (x + res - mean / 64) * torch.rsqrt(var + 1e-5)
    b = (dy * w * xhat).sum(-1, keepdim=True)
    return (dy * w * 64 - a - xhat * b) * torch.rsqrt(var + 1e-5), (dy * xhat).sum(0)


def test_a_group_moves_into_a_later_one_that_reads_what_it_reads():
    args = (randn(32, 64), randn(64), randn(32, 64), randn(32, 64), randn(32, 1), torch.rand(32, 1))
    s = schedule_of(_layer_norm_backward, *args)
    row_kernels = [k for k in s.kernels if k.x_ranges == (32,)]
    assert len(row_kernels) == 1, str(s)   # one pass over dy for both row sums
    assert sum(n.is_reduction for n in row_kernels[0].nodes) == 2
    c = compile_fn(_layer_norm_backward, *args)
    args = (randn(32, 64), randn(64), randn(32, 64), randn(32, 64), randn(32, 1), torch.rand(32, 1))
    assert_matches_eager(_layer_norm_backward, c, *args, atol=1e-4, rtol=1e-4)


def test_a_group_does_not_move_past_a_step_that_reads_it():
    def fn(x, w):
        a = (x * w).sum(-1, keepdim=True)     # read by the matmul before the later group
        m = a.expand(8, 8) @ w.view(8, 1).expand(8, 8)
        return (x * w + m).sum(-1)
    s = schedule_of(fn, randn(8, 8), randn(8))
    first = next(k for k in s.kernels if any(n.is_reduction for n in k.nodes))
    assert s.steps.index(first) < next(i for i, st in enumerate(s.steps) if st in s.externs)
    c = compile_fn(fn, randn(8, 8), randn(8))
    assert_matches_eager(fn, c, randn(8, 8), randn(8))


def test_a_group_does_not_move_past_a_write_into_what_it_reads():
    from surge.lowering.ir import ExternBuffer
    from surge.schedule.fusion import _mutates
    from surge.schedule.groups import ExternStep

    copy = ExternBuffer("buf9", None, torch.float32, torch.device("cpu"), op=torch.ops.aten.copy_.default)
    matmul = ExternBuffer("buf8", None, torch.float32, torch.device("cpu"), op=torch.ops.aten.mm.default)
    assert _mutates(ExternStep(0, copy)) and not _mutates(ExternStep(1, matmul))

    def fn(x, y):
        a = (x * y).sum(-1, keepdim=True)
        x.mul_(2)                             # a copy into the input x, before the group below
        return a, (x * y + a).sum(-1)
    c = compile_fn(fn, randn(8, 8), randn(8, 8))
    x, y = randn(8, 8), randn(8, 8)
    expected = fn(x.clone(), y)
    x2 = x.clone()
    actual = c(x2, y)
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(x2, x * 2)


def test_small_independent_pointwise_work_over_one_space_shares_a_kernel():
    # a step counter per batch-norm layer: one launch for all of them, not one each
    counters = [torch.zeros((), dtype=torch.int64) for _ in range(3)]
    fn = lambda a, b, c: (a + 1, b + 1, c + 1)   # noqa: E731
    assert len(schedule_of(fn, *counters).kernels) == 1
    compiled = compile_fn(fn, *counters)
    assert_matches_eager(fn, compiled, *counters)
    # large ones keep their own kernels: a launch is cheap next to their memory traffic
    big = [torch.randn(300, 300) for _ in range(2)]
    assert len(schedule_of(lambda a, b: (a * 2, b * 3), *big).kernels) == 2


def test_second_stages_of_sibling_split_sums_share_a_kernel():
    from surge.options import CompileConfig

    # two sums over rows of the same space read two partials of one first-stage kernel
    x, y = torch.randn(4, 4096), torch.randn(4, 4096)
    schedule = schedule_of(lambda x, y: (x.sum(1), (x * y).sum(1)), x, y,
                           config=CompileConfig(split_reduction_min_elements=1024))
    assert len(schedule.kernels) == 2, str(schedule)
