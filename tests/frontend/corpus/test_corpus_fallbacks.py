"""Constructs that cannot be captured: the frame is split by a graph break (the
construct runs in CPython between a graph before it and a resume function after
it), or, where the frame cannot be split yet, the whole frame runs eagerly
(counted in `fallbacks`). With fullgraph=True surge raises Unsupported naming
the user's file:line."""
import contextlib
import math
import os
import sys
import time

import numpy as np
import pytest
import torch
import torch.nn as nn

import surge
import surge.errors
from corpus_harness import RecordingBackend, check_fallback, check_graph_breaks, location_of, randn


def mat(i):
    return (randn(3, 4),)


def prints_progress(x):
    y = x * 2
    print("hidden mean computed")  # UNSUPPORTED
    return y + 1


def item_in_python_arithmetic(x):
    total = x.abs().sum().item()  # UNSUPPORTED
    return x / (total + 1.0)


def branch_on_tensor_value(x):
    if x.sum() > 0:  # UNSUPPORTED
        return x * 2
    return x - 1


def numpy_call_on_tensor(x):
    squashed = np.tanh(x.detach().numpy())  # UNSUPPORTED
    return torch.from_numpy(squashed) + x


def explicit_graph_break(x):
    y = x.relu()
    surge.graph_break()  # UNSUPPORTED
    return y * 3


def tolist_into_python(x):
    rows = x.sum(1).tolist()  # UNSUPPORTED
    return x * len(rows), rows


def while_on_tensor_condition(x):
    steps = 0
    while x.abs().max() > 0.1:  # UNSUPPORTED
        x = x * 0.5
        steps += 1
    return x, steps


def int_of_tensor(x):
    k = int(x.argmax())  # UNSUPPORTED
    return x.flatten()[k], k


def float_of_tensor(x):
    scale = float(x.std())  # UNSUPPORTED
    return x / scale


def math_on_tensor(x):
    norm = math.sqrt(x.pow(2).sum())  # UNSUPPORTED
    return x / norm


def any_on_tensor_in_if(x):
    if (x > 2.5).any():  # UNSUPPORTED
        return x.clamp(max=2.5)
    return x + 0


def assert_on_tensor_value(x):
    assert (x.abs() >= 0).all()  # UNSUPPORTED
    return x.exp()


def timing_call(x):
    start = time.perf_counter()  # UNSUPPORTED
    y = x @ x.t()
    return y, start > 0


def _log_shape(t):
    print("shape", tuple(t.shape))  # UNSUPPORTED
    return t


def print_in_inlined_callee(x):
    return _log_shape(x * 2) + 1


def tensor_formatted_in_fstring(x):
    key = f"value={x.sum():.3f}"  # UNSUPPORTED
    return {key: x}


def tensor_in_python_sorted(x):
    ranked = sorted(x.sum(1), key=lambda t: t.item())  # UNSUPPORTED
    return torch.stack(ranked)


class ItemInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        gain = h.mean().item()  # UNSUPPORTED
        return h * gain


def nonzero_count_in_python(x):
    n = len(torch.nonzero(x > 0))  # UNSUPPORTED
    return x * n


def process_id_from_c_function(x):
    salt = os.getpid() % 7  # UNSUPPORTED
    return x + salt


PROGRAMS = [
    nonzero_count_in_python,
    process_id_from_c_function,
    prints_progress,
    item_in_python_arithmetic,
    branch_on_tensor_value,
    numpy_call_on_tensor,
    explicit_graph_break,
    tolist_into_python,
    while_on_tensor_condition,
    int_of_tensor,
    float_of_tensor,
    math_on_tensor,
    any_on_tensor_in_if,
    assert_on_tensor_value,
    timing_call,
    print_in_inlined_callee,
    tensor_formatted_in_fstring,
    tensor_in_python_sorted,
]

# Where the unsupported construct is, when it is not in the program itself.
MARKED_FUNCTION = {print_in_inlined_callee: _log_shape}


def make_inputs(program):
    if program is while_on_tensor_condition:
        # 0.75 halves to 0.09375 in three steps (exact in float32): four checks, four breaks.
        return lambda i: (torch.full((3, 4), 0.75) if i == 0 else randn(3, 4) * 0.01,)
    if program in (any_on_tensor_in_if, branch_on_tensor_value):
        # The first call takes one exit of the branch, the second the other.
        return lambda i: (torch.rand(3, 4) * 2 + 2.6 if i == 0 else -torch.rand(3, 4),)
    if program is nonzero_count_in_python:
        # Eight positive entries on every call: one count, one resume graph.
        return lambda i: ((torch.rand(3, 4) + 0.1) * torch.tensor([[-1.0], [1.0], [1.0]]),)
    if program is int_of_tensor:
        def with_known_argmax(i):
            x = randn(3, 4)
            x[1, 2] = 10.0
            return (x,)
        return with_known_argmax
    return mat


# (graphs, graph breaks) over two calls. A Python number read from a tensor is a
# constant of the resume function, guarded by value: a new value recompiles it.
EXPECTED_SPLITS = {
    nonzero_count_in_python: (2, 1),     # x > 0 | nonzero, len in CPython | x * n
    process_id_from_c_function: (1, 1),  # (no ops before) | os.getpid() | x + salt
    prints_progress: (2, 1),
    item_in_python_arithmetic: (3, 1),   # abs, sum | .item() | x / (total + 1), once per value
    branch_on_tensor_value: (3, 1),      # sum > 0 | branch | x * 2 on one call, x - 1 on the other
    numpy_call_on_tensor: (2, 3),        # detach | .numpy() | np.tanh | torch.from_numpy | + x
    explicit_graph_break: (2, 1),
    tolist_into_python: (3, 1),
    while_on_tensor_condition: (4, 4),   # one graph and one break per check of the condition
    int_of_tensor: (2, 1),
    float_of_tensor: (3, 1),
    math_on_tensor: (3, 1),
    any_on_tensor_in_if: (3, 1),
    assert_on_tensor_value: (2, 1),
    timing_call: (2, 1),                 # the clock value is a new constant on each call
    print_in_inlined_callee: (2, 2),     # x * 2 | the callee, compiled, breaks at its print | + 1
    tensor_formatted_in_fstring: (1, 1),  # sum | format | a new key string each call, no ops
    tensor_in_python_sorted: (2, 1),
}


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_frame_is_split_by_a_graph_break(program):
    graphs, breaks = EXPECTED_SPLITS[program]
    check_graph_breaks(program, make_inputs(program), graphs=graphs, breaks=breaks)


def with_block_in_loop(x):
    for i in range(2):
        with torch.no_grad():
            x = x * 2
            print("step", i)  # UNSUPPORTED
    return x + 1


def nested_with_blocks(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
            print("inner")  # UNSUPPORTED
        z = y + 1
    return y, z


@torch.no_grad()
def decorated_with_no_grad(x):
    y = x * 2
    print("decorated")  # UNSUPPORTED
    return y


def list_comprehension_with_print(x):
    ys = [x * i for i in range(3) if print(i) is None]  # UNSUPPORTED
    return torch.stack(ys)


def generator_expression_with_print(x):
    return sum(t.sum() for t in [x, x * 2] if print("item") is None)  # UNSUPPORTED


def _grad_input(i):
    return (randn(3, 4, requires_grad=True),)


@contextlib.contextmanager
def _tagged():
    yield "tag"


def print_inside_contextmanager_block(x):
    with _tagged():
        y = x * 2
        print("inside")  # UNSUPPORTED
    return y


def break_inside_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x.t()
        surge.graph_break()
    return y.float()


def break_while_iterating_a_generator(x):
    def gen():
        yield x * 2
        yield x * 3
    total = 0
    for y in gen():
        total = total + y
        surge.graph_break()  # UNSUPPORTED
    return total.float()


# Frames that cannot be split at their break: the generator is paused inside the trace.
STILL_FALLING_BACK = [break_while_iterating_a_generator]


@pytest.mark.parametrize("program", STILL_FALLING_BACK, ids=[p.__name__ for p in STILL_FALLING_BACK])
def test_frame_that_cannot_be_split_falls_back(program, capsys):
    check_fallback(program, _grad_input)
    # Eager and the fallback each printed on both calls, in order.
    lines = capsys.readouterr().out.splitlines()
    per_call = {break_while_iterating_a_generator: []}[program]
    assert lines == per_call * 4


# Frames that fell back before breaks could be resumed inside blocks, comprehensions
# and decorated functions: (graphs, breaks) over two calls, printed output in order.
SPLIT_NOW = {
    with_block_in_loop: (3, 2),               # x * 2 | print | x * 2 (a resume of the resume) | print | + 1
    nested_with_blocks: (2, 1),
    decorated_with_no_grad: (1, 1),           # the wrapped function runs compiled inside no_grad
    # 3.11: the comprehension's function runs compiled, split at each print; 3.12
    # inlines it (PEP 709): the frame itself is split at each print, and its iterations
    # share resume functions, whose `i` is a constant at 0 and at 1 (specialized, as in
    # torch.compile), symbolic from 2: for three items, one graph more than unrolled.
    list_comprehension_with_print: (4, 4) if sys.version_info < (3, 12) else (4, 3),
    generator_expression_with_print: (1, 1),  # the generator runs in CPython under sum()
    # Split where the context manager is made (CPython makes the real one), at the
    # `with`, at the print and at the exit; x * 2 is the one graph.
    print_inside_contextmanager_block: (1, 4),
    # The prefix graph leaves the autocast block; the resume function re-enters it.
    break_inside_autocast: (2, 1),
}


@pytest.mark.parametrize("program", SPLIT_NOW, ids=[p.__name__ for p in SPLIT_NOW])
def test_frame_split_inside_blocks_comprehensions_and_decorated_functions(program):
    graphs, breaks = SPLIT_NOW[program]
    check_graph_breaks(program, _grad_input, graphs=graphs, breaks=breaks)


@pytest.mark.parametrize("program", STILL_FALLING_BACK, ids=[p.__name__ for p in STILL_FALLING_BACK])
def test_fullgraph_raises_where_a_frame_cannot_be_split(program):
    compiled = surge.compile(program, fullgraph=True, backend=RecordingBackend())
    with pytest.raises(surge.errors.Unsupported) as info:
        compiled(*_grad_input(0))
    assert location_of(getattr(program, "__wrapped__", program), "# UNSUPPORTED") in str(info.value)


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_fullgraph_raises_unsupported_with_location(program):
    compiled = surge.compile(program, fullgraph=True, backend=RecordingBackend())
    with pytest.raises(surge.errors.Unsupported) as info:
        compiled(*make_inputs(program)(0))
    location = location_of(MARKED_FUNCTION.get(program, program), "# UNSUPPORTED")
    assert location in str(info.value), f"expected {location} in:\n{info.value}"


def test_module_with_item_breaks_and_stays_shared():
    module = ItemInForward()
    compiled = surge.compile(module, backend=RecordingBackend())
    for _ in range(2):
        x = randn(2, 4)
        torch.testing.assert_close(compiled(x), module(x))
    # fc and mean before the break; the gain is a new constant on every call.
    assert surge.counters["fallbacks"] == 0 and surge.counters["graph_breaks"] == 1
    assert surge.counters["graphs"] == 3
    module.fc.weight.data.mul_(2)  # the parameters are read from the module on every call
    x = randn(2, 4)
    torch.testing.assert_close(compiled(x), module(x))


def test_module_with_item_fullgraph_names_forward_line():
    compiled = surge.compile(ItemInForward(), fullgraph=True)
    with pytest.raises(surge.errors.Unsupported) as info:
        compiled(randn(2, 4))
    assert location_of(ItemInForward.forward, "# UNSUPPORTED") in str(info.value)


def test_break_does_not_leak_into_other_functions():
    def clean(x):
        return x.relu() * 2

    check_graph_breaks(prints_progress, mat, graphs=2, breaks=1)
    backend = RecordingBackend()
    compiled = surge.compile(clean, backend=backend)
    x = randn(3)
    torch.testing.assert_close(compiled(x), x.relu() * 2)
    assert len(backend.graphs) == 1 and surge.counters["graph_breaks"] == 1


def test_graph_break_is_a_no_op_in_eager():
    x = randn(3, 4)
    torch.testing.assert_close(explicit_graph_break(x), x.relu() * 3)
