"""Graph breaks and everything around them: side effects replayed in eager's order
relative to the construct CPython runs, modules and training, explain, fullgraph,
caching of resume functions, and tracebacks that point at the user's lines."""
import inspect
import os
import traceback

import pytest
import torch
import torch.nn as nn

import surge
import surge.errors
from corpus_harness import (
    CounterDelta, RecordingBackend, check_graph_breaks, compare_call, line_of, location_of, randn, run_printing,
)

CALLS = 0
EVENTS: list = []


def global_counter_printed_after_update(x):
    global CALLS
    CALLS += 1
    print("calls so far", CALLS)  # CPython reads the global the graph's entry just wrote
    return x * CALLS


def test_global_write_is_replayed_before_the_print():
    global CALLS
    CALLS = 0
    backend = RecordingBackend()
    compiled = surge.compile(global_counter_printed_after_update, backend=backend)
    _, printed = run_printing(lambda: [compiled(randn(2)) for _ in range(3)])
    assert printed == "calls so far 1\ncalls so far 2\ncalls so far 3\n"
    # The global is a guarded constant of the capture: each new value recompiles the
    # function and its resume function (which reads it in `x * CALLS`).
    assert CALLS == 3 and surge.counters["fallbacks"] == 0
    assert surge.counters["graph_breaks"] == 3 and surge.counters["recompiles"] == 4


def appends_around_a_break(x, log):
    log.append("before")
    y = x + 1
    print(len(log))
    log.append("after")
    return y * 2


def test_input_list_mutations_around_a_break():
    check_graph_breaks(appends_around_a_break, lambda i: (randn(3), ["start"]), graphs=2, breaks=1)


def mutates_input_in_place_then_prints_it(x):
    x.mul_(2)
    print("sum is positive:", bool(x.abs().sum() >= 0))
    x.add_(1)
    return x


def test_in_place_ops_on_inputs_happen_once_and_in_order():
    check_graph_breaks(mutates_input_in_place_then_prints_it, lambda i: (randn(3),), graphs=2, breaks=2)


class Tagged(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.tag = "fresh"

    def forward(self, x):
        self.tag = "seen"
        y = self.lin(x)
        EVENTS.append(self.tag)  # CPython runs this after the entry replayed the attribute write
        surge.graph_break()
        return y.relu()


def test_module_attribute_write_before_a_break():
    EVENTS.clear()
    module = Tagged()
    compiled = surge.compile(module, backend=RecordingBackend())
    x = randn(2, 4)
    torch.testing.assert_close(compiled(x), module.lin(x).relu())
    assert module.tag == "seen" and EVENTS == ["seen"]


def counter_with_nonlocal():
    count = 0

    def step(x):
        nonlocal count
        count += 1
        print("step", count)
        return x * count
    return step


def test_nonlocal_write_is_seen_by_cpython_at_the_break():
    eager_step, compiled_step = counter_with_nonlocal(), counter_with_nonlocal()
    compiled = surge.compile(compiled_step, backend=RecordingBackend())
    for _ in range(3):
        x = randn(3)
        expected, eager_printed = run_printing(lambda: eager_step(x))
        actual, printed = run_printing(lambda: compiled(x))
        torch.testing.assert_close(actual, expected)
        assert printed == eager_printed
    # The count is a guarded constant of the capture: each new value recompiles.
    assert surge.counters["fallbacks"] == 0 and surge.counters["graph_breaks"] == 3


class NormWithBreak(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        h = self.bn(x)
        print("normalized", tuple(h.shape))
        return self.lin(h).tanh()


def test_batchnorm_statistics_and_gradients_across_a_break():
    torch.manual_seed(0)
    eager = NormWithBreak()
    compiled_module = NormWithBreak()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = surge.compile(compiled_module, backend=RecordingBackend())
    for _ in range(2):
        x = randn(5, 4)
        expected, eager_printed = run_printing(lambda: eager(x))
        actual, printed = run_printing(lambda: compiled(x.clone()))
        torch.testing.assert_close(actual, expected)
        assert printed == eager_printed
        expected.sum().backward()
        actual.sum().backward()
    for name, buffer in eager.named_buffers():
        torch.testing.assert_close(dict(compiled_module.named_buffers())[name], buffer)
    for (name, p), q in zip(eager.named_parameters(), compiled_module.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)
    assert surge.counters["graph_breaks"] == 1 and surge.counters["fallbacks"] == 0


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        print("block")
        return self.lin(x).relu()


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        x = x * 2
        for block in self.blocks:
            x = block(x) + x
        return self.head(x)


def test_submodule_with_print_is_split_inside_its_forward():
    module = Stack()
    backend = RecordingBackend()
    compiled = surge.compile(module, backend=backend)
    x = randn(3, 4, requires_grad=True)
    expected, eager_printed = run_printing(lambda: module(x))
    actual, printed = run_printing(lambda: compiled(x))
    torch.testing.assert_close(actual, expected)
    assert printed == eager_printed == "block\nblock\n"
    # The caller breaks at each block call, and the blocks' forward (compiled on its
    # own) breaks at its print; the two blocks are alike, so one entry of the forward
    # and one of its resume serve both, and the caller's resume after the call splits at
    # the loop's next iteration, so both iterations run it: x * 2 | linear, relu | + x | head.
    assert surge.counters["graph_breaks"] == 3 and surge.counters["fallbacks"] == 0
    assert [backend.op_names(i) for i in range(len(backend.graphs))] == [
        ["mul"], ["linear", "relu"], ["add"], ["linear"]]
    grads = torch.autograd.grad(actual.sum(), [x, *module.parameters()])
    eager_grads = torch.autograd.grad(module(x).sum(), [x, *module.parameters()])
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e)


def two_breaks(x):
    y = x.sin()
    print("one")  # FIRST
    z = y.cos()
    if z.sum() > 0:  # SECOND
        z = z + 1
    return z


def test_explain_lists_every_break_with_location_and_source():
    report = surge.explain(two_breaks)(torch.rand(3))
    assert report.graph_break_count == 2 and not report.fallbacks
    first, second = report.break_reasons
    assert location_of(two_breaks, "# FIRST") in first.location and "print()" in first.reason
    assert location_of(two_breaks, "# SECOND") in second.location and "tensor's value" in second.reason
    text = str(report)
    assert 'print("one")' in text and "if z.sum() > 0:" in text
    assert report.graph_count == 3


@pytest.mark.parametrize("program", [two_breaks, appends_around_a_break, Stack()],
                         ids=["two_breaks", "appends_around_a_break", "Stack"])
def test_fullgraph_raises_at_the_first_break(program):
    compiled = surge.compile(program, fullgraph=True, backend=RecordingBackend())
    args = (randn(3, 4),) if isinstance(program, nn.Module) else (torch.rand(3),) + (
        (["x"],) if program is appends_around_a_break else ())
    with pytest.raises(surge.errors.Unsupported) as info:
        compiled(*args)
    if program is two_breaks:
        assert location_of(two_breaks, "# FIRST") in str(info.value)
    assert surge.counters["graph_breaks"] == 0


def test_resume_functions_are_cached_and_guarded():
    backend = RecordingBackend()
    compiled = surge.compile(two_breaks, backend=backend)
    delta = CounterDelta()
    for _ in range(3):
        compare_call(compiled, two_breaks, (torch.rand(3),))
    assert len(backend.graphs) == 3  # sin | cos, sum, gt | z + 1
    assert delta["cache_hits"] == 6  # calls 2 and 3 hit three entries each
    compare_call(compiled, two_breaks, (torch.rand(5),))  # a new shape: each piece recompiles
    assert len(backend.graphs) == 6 and delta["recompiles"] == 3


def raises_after_break(x):
    y = x * 2
    surge.graph_break()
    if y.shape[0] == 3:
        raise ValueError("three rows")  # RAISE
    return y


def test_exception_after_a_break_points_at_the_user_line():
    compiled = surge.compile(raises_after_break, backend=RecordingBackend())
    with pytest.raises(ValueError, match="three rows") as info:
        compiled(randn(3))
    frames = traceback.extract_tb(info.tb)
    assert frames[-1].lineno == line_of(raises_after_break, "# RAISE")
    assert frames[-1].filename == inspect.getsourcefile(raises_after_break)
    torch.testing.assert_close(compiled(randn(2) * 0 + 1), torch.full((2,), 2.0))


def test_break_code_is_logged_under_bytecode(monkeypatch, capsys):
    monkeypatch.setenv("SURGE_LOGS", "bytecode,graph_breaks")
    compiled = surge.compile(two_breaks, backend=RecordingBackend())
    compiled(torch.rand(3))
    err = capsys.readouterr().err
    assert "break code for two_breaks" in err and "RETURN_VALUE" in err
    assert "[surge:graph_breaks] graph break in two_breaks" in err
    assert f"{os.path.basename(__file__)}:{line_of(two_breaks, '# FIRST')}" in err


def aliased_list_mutated_after_break(x):
    parts = [x * 2]
    same = parts
    surge.graph_break()
    parts.append(x + 1)  # seen through `same` too, as in eager
    return torch.cat(same), len(same)


def test_objects_made_before_a_break_keep_their_identity():
    check_graph_breaks(aliased_list_mutated_after_break, lambda i: (randn(3),), graphs=2, breaks=1)


def appends_to_one_reads_other(x, a, b):
    a.append(1)
    return x * len(b)


def test_aliased_input_lists_are_one_object_and_guarded():
    backend = RecordingBackend()
    compiled = surge.compile(appends_to_one_reads_other, backend=backend)
    x = randn(2)
    shared = [0]
    torch.testing.assert_close(compiled(x, shared, shared), x * 2)
    assert shared == [0, 1]
    # The same call with two distinct lists must not reuse the aliased entry.
    a, b = [0], [0]
    torch.testing.assert_close(compiled(x, a, b), x * 1)
    assert a == [0, 1] and b == [0]
    assert len(backend.graphs) == 2
