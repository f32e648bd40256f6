"""In-place reuse: a kernel output takes the storage of a buffer the same kernel reads last.

``gelu(x @ w + b) + r``: the epilogue reads each element of the matmul's result once,
at the element it writes, so it writes over it (one allocation fewer per call, as
torch.compile does). Every case where a thread could read an element after it or
another thread wrote it must keep its own allocation; each case is checked against
eager and on the memory plan.
"""
import pytest
import torch
import torch.nn.functional as F

from surge.backends.cpp import compile_aten_graph_cpp

from .helpers import aten_graph, assert_matches_eager, compile_fn, randn, schedule_of


def in_place_pairs(plan) -> list:
    """(output, donor) for every reuse of a buffer read by the step that takes it."""
    return [(name, src) for sm in plan.steps for name, src in sm.allocate if src in sm.in_place()]


def matmul_donors(schedule) -> set:
    return {s.buffer.name for s in schedule.externs
            if s.buffer.op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)}


def seed_block(x, w, b, r):
    return F.gelu(x @ w + b) + r


def block_inputs():
    return randn(16, 32), randn(32, 32), randn(32), randn(16, 32)


def on_cpu(inputs):
    """The C++ backend's inputs (the Triton tests run on the GPU where there is one)."""
    return tuple(t.cpu() for t in inputs)


def test_epilogue_writes_over_the_matmul_result_triton():
    inputs = block_inputs()
    compiled = compile_fn(seed_block, *inputs)
    plan = compiled.schedule.memory
    assert in_place_pairs(plan) == [(compiled.schedule.kernels[0].stores[0],
                                     *matmul_donors(compiled.schedule))], str(plan)
    assert (plan.allocations, plan.reuses) == (0, 1), str(plan)   # without it: 1 allocation
    assert "# reuse in place" in compiled.source
    for _ in range(2):   # the second call finds the storage of the first call's result reused
        assert_matches_eager(seed_block, compiled, *block_inputs(), atol=1e-5, rtol=1e-5)


def test_epilogue_writes_over_the_matmul_result_cpp():
    inputs = on_cpu(block_inputs())
    compiled = compile_aten_graph_cpp(aten_graph(seed_block, *inputs), list(inputs))
    plan = compiled.schedule.memory
    (kernel,) = compiled.schedule.kernels
    assert in_place_pairs(plan) == [(kernel.stores[0], *matmul_donors(compiled.schedule))], str(plan)
    assert (plan.allocations, plan.reuses) == (0, 1), str(plan)
    # the output and the donor share storage: neither pointer may be declared __restrict__
    signature = next(line for line in compiled.cpp_source.splitlines() if line.startswith("static void"))
    assert signature.count("__restrict__") == signature.count("*") - 2, signature
    for _ in range(2):
        assert_matches_eager(seed_block, compiled, *on_cpu(block_inputs()), atol=1e-5, rtol=1e-5)


def linear_residual(x, w, b, r):
    # the matmul's result is [B*T, C]; the epilogue's is [B, T, C]: the same elements
    return F.gelu(F.linear(x, w, b)) + r


def linear_inputs():
    return randn(2, 8, 32), randn(32, 32), randn(32), randn(2, 8, 32)


def test_epilogue_of_another_shape_writes_over_the_matmul_result_triton():
    compiled = compile_fn(linear_residual, *linear_inputs())
    schedule = compiled.schedule
    (kernel,) = schedule.kernels
    (donor,) = matmul_donors(schedule)
    assert len(schedule.graph.by_name[donor].layout.shape) == 2
    assert in_place_pairs(schedule.memory) == [(kernel.stores[0], donor)], str(schedule)
    assert "same_storage(" in compiled.source
    for _ in range(2):
        inputs = linear_inputs()
        out = compiled(*inputs)
        assert out._base is None   # a tensor of its own, as eager's result is
        torch.testing.assert_close(out, linear_residual(*inputs), atol=1e-5, rtol=1e-5)


def test_epilogue_of_another_shape_writes_over_the_matmul_result_cpp():
    inputs = on_cpu(linear_inputs())
    compiled = compile_aten_graph_cpp(aten_graph(linear_residual, *inputs), list(inputs))
    (kernel,) = compiled.schedule.kernels
    assert [name for name, _ in in_place_pairs(compiled.schedule.memory)] == kernel.stores, str(compiled.schedule)
    for _ in range(2):
        assert_matches_eager(linear_residual, compiled, *on_cpu(linear_inputs()), atol=1e-5, rtol=1e-5)


def stored_intermediate(x, w, b):
    # h reaches memory as an output; gelu(h) is stored after it: it takes the matmul's
    # storage, which h's store has read before
    h = x @ w + b
    return h, F.gelu(h)


def two_outputs_read_it(x, w):
    t = x @ w
    return t * 2, t + 1


@pytest.mark.parametrize("fn", [stored_intermediate, two_outputs_read_it])
def test_the_last_output_reading_the_donor_takes_it(fn):
    inputs = block_inputs()[:fn.__code__.co_argcount]
    compiled = compile_fn(fn, *inputs)
    schedule = compiled.schedule
    (kernel,) = schedule.kernels
    assert len(kernel.stores) == 2
    assert in_place_pairs(schedule.memory) == [(kernel.stores[1], *matmul_donors(schedule))], str(schedule)
    assert_matches_eager(fn, compiled, *block_inputs()[:len(inputs)], atol=1e-5, rtol=1e-5)


def input_and_matmul(x, w, r):
    # one kernel stores r * 2 (not computed from the product) and the product's
    # epilogue: only the epilogue may take the product's storage
    t = x @ w
    return (t + r).relu(), r * 2


def test_an_output_not_computed_from_the_donor_does_not_take_it():
    x, w, _, r = block_inputs()
    compiled = compile_fn(input_and_matmul, x, w, r)
    schedule = compiled.schedule
    (kernel,) = schedule.kernels
    assert len(kernel.stores) == 2
    relu = next(n.name for n in kernel.nodes if "relu" in n.origins)
    assert in_place_pairs(schedule.memory) == [(relu, *matmul_donors(schedule))], str(schedule)
    x, w, _, r = block_inputs()
    assert_matches_eager(input_and_matmul, compiled, x, w, r)


def transposed(x, w):
    t = x @ w
    return t.t() + 1


def shifted(x, w):
    t = x @ w
    return t + F.pad(t[:, 1:], (0, 1))


def matmul_is_output(x, w):
    t = x @ w
    return t, t.relu() * 2


def row_centered(x, w):
    t = x @ w
    return t - t.sum(-1, keepdim=True)


def input_dies(x, w):
    return x.relu() * 2 + x


NO_IN_PLACE = {
    "transposed read": transposed,
    "shifted read": shifted,
    "donor is a graph output": matmul_is_output,
    "a reduction reads it": row_centered,
    "graph input": input_dies,
}


@pytest.mark.parametrize("case", sorted(NO_IN_PLACE))
def test_no_in_place_reuse(case):
    fn = NO_IN_PLACE[case]
    inputs = randn(24, 24), randn(24, 24)
    schedule = schedule_of(fn, *inputs)
    assert any(s.nodes for s in schedule.kernels)
    assert in_place_pairs(schedule.memory) == [], str(schedule)
    compiled = compile_fn(fn, *inputs)
    assert "# reuse in place" not in compiled.source
    assert_matches_eager(fn, compiled, randn(24, 24), randn(24, 24), atol=1e-4, rtol=1e-4)


def test_reads_at_the_element_in_place_only_when_shapes_match():
    # the shifted case above: the same program with only the aligned read does reuse
    aligned = lambda x, w: (x @ w) * 2 + 1  # noqa: E731
    schedule = schedule_of(aligned, randn(24, 24), randn(24, 24))
    assert [donor for _, donor in in_place_pairs(schedule.memory)] == list(matmul_donors(schedule))


def test_no_in_place_where_the_cpu_vector_loop_may_run_twice():
    # a CPU kernel rounding to bf16 reruns its vector loop as scalar code over a block
    # with a NaN or denormal (codegen/cpp/vector16.py): it would read what it wrote
    inputs = (torch.randn(16, 64).to(torch.bfloat16), torch.randn(64, 64).to(torch.bfloat16))
    fn = lambda x, w: (x @ w) * 2 + 1  # noqa: E731
    compiled = compile_aten_graph_cpp(aten_graph(fn, *inputs), list(inputs))
    assert compiled.schedule.kernels and in_place_pairs(compiled.schedule.memory) == []
    x, w = torch.randn(16, 64).to(torch.bfloat16), torch.randn(64, 64).to(torch.bfloat16)
    x[3, 5] = float("nan")
    torch.testing.assert_close(compiled(x, w), fn(x, w), equal_nan=True)


def test_configs_are_timed_on_a_copy_of_storage_read_and_written_in_place():
    # autotuning runs a kernel many times: one writing over what it reads would read its
    # own results from the second run on (runtime/launcher.py)
    from surge.runtime.launcher import _timing_args

    donor, other = torch.arange(12.).reshape(3, 4), torch.ones(3)
    from_start = torch.as_strided(donor, (1,), (1,), 0)   # an extern view passed from its storage start
    timed = _timing_args([donor, other, donor, from_start])
    assert timed[1] is other
    assert timed[0].data_ptr() == timed[2].data_ptr() == timed[3].data_ptr() != donor.data_ptr()
    assert timed[0].stride() == donor.stride() and torch.equal(timed[0], donor)
    timed[0].add_(1)
    assert torch.equal(donor, torch.arange(12.).reshape(3, 4))
    plain = [donor, other]
    assert all(a is b for a, b in zip(_timing_args(plain), plain))
