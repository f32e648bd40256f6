"""Constructs that cannot be captured yet: the whole frame runs eagerly (results
still right, counted in `fallbacks`), and with fullgraph=True surge raises
Unsupported naming the user's file:line."""
import math
import os
import time

import numpy as np
import pytest
import torch
import torch.nn as nn

import surge
import surge.errors
from corpus_harness import RecordingBackend, check_fallback, location_of, randn


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
    if program in (while_on_tensor_condition, any_on_tensor_in_if):
        # Sometimes the branch is taken and sometimes not: eager decides each time.
        return lambda i: (randn(3, 4) * (3.0 if i == 0 else 0.01),)
    return mat


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_frame_falls_back_to_eager(program):
    if program is timing_call:
        # The result contains a clock value; compare only what is deterministic.
        compiled = surge.compile(program, backend=RecordingBackend())
        x = randn(3, 4)
        y, positive = compiled(x)
        torch.testing.assert_close(y, x @ x.t())
        assert positive is True and surge.counters["fallbacks"] >= 1
        return
    check_fallback(program, make_inputs(program))


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_fullgraph_raises_unsupported_with_location(program):
    compiled = surge.compile(program, fullgraph=True, backend=RecordingBackend())
    with pytest.raises(surge.errors.Unsupported) as info:
        compiled(*make_inputs(program)(0))
    location = location_of(MARKED_FUNCTION.get(program, program), "# UNSUPPORTED")
    assert location in str(info.value), f"expected {location} in:\n{info.value}"


def test_module_with_item_falls_back_and_stays_shared():
    module = ItemInForward()
    compiled = surge.compile(module, backend=RecordingBackend())
    for _ in range(2):
        x = randn(2, 4)
        torch.testing.assert_close(compiled(x), module(x))
    assert surge.counters["fallbacks"] >= 1 and surge.counters["graphs"] == 0


def test_module_with_item_fullgraph_names_forward_line():
    compiled = surge.compile(ItemInForward(), fullgraph=True)
    with pytest.raises(surge.errors.Unsupported) as info:
        compiled(randn(2, 4))
    assert location_of(ItemInForward.forward, "# UNSUPPORTED") in str(info.value)


def test_fallback_does_not_leak_into_other_functions():
    def clean(x):
        return x.relu() * 2

    check_fallback(prints_progress, mat)
    backend = RecordingBackend()
    compiled = surge.compile(clean, backend=backend)
    x = randn(3)
    torch.testing.assert_close(compiled(x), x.relu() * 2)
    assert len(backend.graphs) == 1


def test_graph_break_is_a_no_op_in_eager():
    x = randn(3, 4)
    torch.testing.assert_close(explicit_graph_break(x), x.relu() * 3)
