"""A kernel stores a mutated input's new value into the input itself, where that is safe.

The aot layer ends a graph that updates inputs in place with ``copy_(input, value)``;
when nothing but the kernel computing ``value`` reads the input, and it reads each
element only to compute that element, the kernel writes into the input and the copy
goes. Every case is checked against eager, and on the schedule (which copies remain).
"""
import pytest
import torch

import surge
import surge.aot
from surge.lowering.lower import lower_graph
from surge.schedule import schedule_graph


def schedule_of(fn, inputs):
    gm = surge.aot.trace_aten(torch.fx.symbolic_trace(fn), list(inputs))
    graph, _ = lower_graph(gm, list(inputs))
    return schedule_graph(graph)


def copies_left(schedule) -> int:
    return sum(1 for s in schedule.externs if s.buffer.op is torch.ops.aten.copy_.default)


def assert_mutates_like_eager(fn, inputs, backend):
    eager_inputs = [t.clone() for t in inputs]
    mine = [t.clone() for t in inputs]
    expected = fn(*eager_inputs)
    actual = surge.compile(fn, backend=backend)(*mine)
    for a, e in zip(mine, eager_inputs):
        torch.testing.assert_close(a, e)
    if expected is not None:
        torch.testing.assert_close(actual, expected)
    assert surge.counters["fallbacks"] == 0


def momentum_update(p, m, g):
    m.mul_(0.9).add_(g)
    p.add_(m * -0.1)


def old_value_read_by_a_reduction(x, g):
    total = x.sum()
    x.mul_(g)
    return total


def old_value_read_at_another_element(x):
    x.copy_(x.flip(0) + 1)


def new_value_overwrites_without_reading(x, g):
    x.copy_(g * 2)


CASES = {
    # (function, input shapes, copies the schedule keeps)
    "momentum_update": (momentum_update, [(8, 4), (8, 4), (8, 4)], 0),
    # the reduction reads x in a kernel of its own: the update must not overwrite it first
    "old_value_read_by_a_reduction": (old_value_read_by_a_reduction, [(8, 4), (8, 4)], 1),
    # element i of the new value reads element n-1-i of the old one
    "old_value_read_at_another_element": (old_value_read_at_another_element, [(8, 4)], 1),
    "new_value_overwrites_without_reading": (new_value_overwrites_without_reading, [(8, 4), (8, 4)], 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_schedule_keeps_only_the_copies_it_needs(case):
    fn, shapes, copies = CASES[case]
    assert copies_left(schedule_of(fn, [torch.randn(s) for s in shapes])) == copies


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", list(CASES))
def test_inputs_mutated_like_eager(case, backend):
    fn, shapes, _ = CASES[case]
    assert_mutates_like_eager(fn, [torch.randn(s) for s in shapes], backend)


def test_memory_plan_gives_the_value_the_inputs_storage():
    schedule = schedule_of(momentum_update, [torch.randn(8, 4) for _ in range(3)])
    inputs = {b.name for b in schedule.graph.inputs}
    taken = [src for sm in schedule.memory.steps for _, src in sm.allocate if src in inputs]
    assert len(taken) == 2


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_later_call_with_aliased_inputs_runs_like_eager(backend):
    """The aliasing check is redone when an input's data moves: a call whose updated input
    shares memory with another input (after calls where none did) gets eager's result."""
    def update(x, y):
        x.add_(y)

    compiled = surge.compile(update, backend=backend)
    x, y = torch.randn(8), torch.randn(8)
    expected_x = x + y
    compiled(x, y)
    torch.testing.assert_close(x, expected_x)  # separate inputs: compiled
    base = torch.randn(8)
    expected = base.clone()
    update(expected, expected)
    compiled(base, base)
    torch.testing.assert_close(base, expected)
