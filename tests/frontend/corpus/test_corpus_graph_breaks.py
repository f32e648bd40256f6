"""Programs split by graph breaks: the graph before the break runs, CPython runs
the construct surge cannot capture, and a resume function (itself compiled)
continues. Each program is compared with eager on fresh inputs: results,
arguments afterwards, printed output in order, and how many graphs and breaks
the split made over two calls."""
import logging
import math
import os
import zlib

import numpy as np
import pytest
import torch
import torch.nn as nn

import surge
from corpus_harness import check_graph_breaks, randn


def mat(i):
    return (randn(3, 4),)


def mat_grad(i):
    return (randn(3, 4, requires_grad=True),)


# ---- print -------------------------------------------------------------------------


def print_between_ops(x):
    y = x.sin()
    print("between")
    return y.cos()


def print_tensor_shape_and_dtype(x):
    y = x @ x.t()
    print("gram", tuple(y.shape), y.dtype)
    return y.relu()


def print_twice(x):
    a = x + 1
    print("first")
    b = a * 2
    print("second")
    return b - 3


def print_first(x):
    print("starting")
    return x.exp() + 1


def print_last(x):
    y = x.tanh()
    print("done")
    return y


def print_with_keywords(x):
    y = x * 3
    print("a", "b", sep="-", end="!\n")
    return y + 1


def print_in_fstring_of_shape(x):
    y = x.sum(0)
    print(f"reduced to {y.shape[0]} values")
    return y * 2


def _report(tag, t):
    print(tag, t.dim())
    return t


def print_in_helper(x):
    y = _report("helper", x + 1)
    return y * 2


def print_python_values_from_the_trace(x):
    sizes = [d * 2 for d in x.shape]
    print("sizes", sizes)
    return x.reshape(sizes[0] // 2, sizes[1] // 2) + sum(sizes)


def print_in_both_branches_of_a_python_condition(x, verbose):
    if verbose:
        print("verbose")
    else:
        print("quiet")
    return x * 2


# ---- logging -----------------------------------------------------------------------

LOG_RECORDS: list = []


class _ListHandler(logging.Handler):
    def emit(self, record):
        LOG_RECORDS.append(record.getMessage())


_logger = logging.getLogger("surge_corpus_breaks")
_logger.addHandler(_ListHandler())
_logger.setLevel(logging.INFO)
_logger.propagate = False


def logging_info_between_ops(x):
    y = x.abs()
    _logger.info("abs done")
    return y.sqrt()


def logging_with_arguments(x):
    y = x.sum(1)
    _logger.warning("summed %d rows", y.shape[0])
    return y + 1


# ---- reading tensor data -----------------------------------------------------------


def item_of_count(x):
    count = (x > 100).sum().item()  # always 0 for these inputs
    return x * (count + 1)


def tolist_of_shape_values(x):
    dims = torch.tensor(x.shape).tolist()
    return x.reshape(dims[1], dims[0]) + 1


def numpy_round_trip(x):
    arr = x.detach().numpy()
    back = torch.from_numpy(arr * 2)
    return back + x


def bool_of_tensor(x):
    flag = bool((x > -100).all())
    return x * 2 if flag else x


def int_of_argmax(x):
    k = int(x.argmax())
    return x.flatten()[k] * 2


def item_used_in_condition(x):
    if x.abs().max().item() > 1000:
        return x * 0
    return x + 1


def branch_on_tensor_both_exits(x):
    y = x * 2
    if y.sum() > 0:
        z = y + 1
    else:
        z = y - 1
    return z * 3


def ternary_on_tensor(x):
    y = x.exp() if x.mean() > 0 else x.neg()
    return y + 1


def branch_on_all(x):
    if (x > 0).all():
        return x.log()
    return x.abs().log1p()


def while_halving(x):
    steps = 0
    while x.max() > 1:
        x = x / 2
        steps += 1
    return x, steps


def and_of_tensor_conditions(x):
    if x.sum() > 0 and x.max() > 0.5:
        return x * 10
    return x


def assert_on_tensor(x):
    y = x.abs()
    assert (y >= 0).all()
    return y + 1


# ---- unknown C functions -----------------------------------------------------------


def crc_of_bytes(x):
    salt = zlib.crc32(b"surge") % 5
    return x + salt


def numpy_function_on_array(x):
    arr = np.ones((3, 4), dtype=np.float32)
    scaled = np.multiply(arr, 3.0)
    return x + torch.from_numpy(scaled)


def pid_parity(x):
    parity = os.getpid() % 2
    return x * (parity + 1)


def math_of_item(x):
    n = math.floor(x.abs().sum().item() * 0 + 2.5)
    return x * n


# ---- surge.graph_break() -----------------------------------------------------------


def explicit_break_twice(x):
    a = x.sin()
    surge.graph_break()
    b = a.cos()
    surge.graph_break()
    return b + a


def explicit_break_first(x):
    surge.graph_break()
    return x * 2


def _inner_with_break(t):
    t = t + 1
    surge.graph_break()
    return t * 2


def explicit_break_in_callee(x):
    y = x.relu()
    return _inner_with_break(y) - 1


def break_then_python_values(x):
    scale = 2
    names = ["a", "b"]
    surge.graph_break()
    return {names[0]: x * scale, names[1]: x + scale}


def break_keeps_locals_of_all_kinds(x, bias=None, *, gain=3):
    y = x * gain
    pair = (y, 7)
    surge.graph_break()
    if bias is not None:
        y = y + bias
    return pair[0] + y, pair[1]


# ---- loops -------------------------------------------------------------------------


def break_in_range_loop(x):
    for i in range(3):
        x = x + i
        surge.graph_break()
    return x * 2


def print_in_loop_over_tensors(x):
    outs = []
    for row in x:
        outs.append(row.sum())
        print("row")
    return torch.stack(outs)


def break_in_enumerate_loop(x):
    total = x * 0
    for i, row in enumerate(x.unbind(0)):
        total = total + row * i
        surge.graph_break()
    return total


def break_in_zip_loop(x):
    acc = x[0] * 0
    for a, b in zip(x.unbind(0), [1.0, 2.0, 3.0]):
        acc = acc + a * b
        print("pair", b)
    return acc


def break_in_nested_loops(x):
    for i in range(2):
        for j in range(2):
            x = x + (i * 2 + j)
            surge.graph_break()
    return x


def python_break_after_graph_break(x):
    for i in range(5):
        x = x * 2
        surge.graph_break()
        if i == 1:
            break
    return x


def list_built_across_breaks(x):
    parts = []
    for k in range(3):
        parts.append(x * k)
        surge.graph_break()
    return torch.cat(parts)


def branch_on_tensor_in_loop(x):
    for _ in range(3):
        if x.sum() > 0:
            x = x - 1
        else:
            x = x + 1
    return x


# ---- grad mode ---------------------------------------------------------------------


def break_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        surge.graph_break()
        z = y + 1
    w = x * 3
    return z, w, z.requires_grad, w.requires_grad


def print_inside_no_grad(x):
    y = x.sin()
    with torch.no_grad():
        print("in no_grad", torch.is_grad_enabled())
        z = y * 2
    return y + z, torch.is_grad_enabled()


def break_inside_set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        y = x * 2
        surge.graph_break()
        z = y * 3
    return z, z.requires_grad


def break_after_no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    surge.graph_break()
    return x * y, torch.is_grad_enabled()


def backward_through_break(x):
    y = x.sin()
    print("mid")
    return (y * y).sum()


# ---- try blocks --------------------------------------------------------------------


def break_inside_try(x):
    try:
        y = x * 2
        print("in try")
        y = y + 1
    except ValueError:
        y = x
    return y


def c_call_raising_into_user_handler(x):
    try:
        np.ones(3).reshape(5)
        y = x
    except ValueError:
        y = x * 10
    return y + 1


# ---- closures ----------------------------------------------------------------------


def _make_scaled(scale):
    def scaled(x):
        y = x * scale
        surge.graph_break()
        return y + scale
    return scaled


closure_read_after_break = _make_scaled(3.0)


def closure_made_after_break(x):
    offset = 2.0
    surge.graph_break()

    def add(t):
        return t + offset
    return add(x * 2)


# ---- bytecodes surge does not capture -------------------------------------------------


def class_defined_in_function(x):
    class Box:
        scale = 3
    return x * Box.scale


def deleted_local_then_print(x):
    y = x * 2
    del x
    print("deleted")
    return y


PROGRAMS = {
    # program: (make_args, graphs, breaks) over two calls
    print_between_ops: (mat, 2, 1),
    print_tensor_shape_and_dtype: (mat, 2, 1),
    print_twice: (mat, 3, 2),
    print_first: (mat, 1, 1),
    print_last: (mat, 1, 1),
    print_with_keywords: (mat, 2, 1),
    print_in_fstring_of_shape: (mat, 2, 1),
    print_in_helper: (mat, 2, 2),
    print_python_values_from_the_trace: (mat, 1, 1),
    print_in_both_branches_of_a_python_condition: (lambda i: (randn(3, 4), i == 0), 2, 2),
    logging_info_between_ops: (mat, 2, 1),
    logging_with_arguments: (mat, 2, 1),
    item_of_count: (mat, 2, 1),
    tolist_of_shape_values: (mat, 2, 1),
    numpy_round_trip: (mat, 2, 3),
    bool_of_tensor: (mat, 2, 1),
    int_of_argmax: (lambda i: (torch.arange(12.0).reshape(3, 4) * (i + 1),), 2, 1),
    item_used_in_condition: (mat, 3, 1),
    branch_on_tensor_both_exits: (lambda i: (torch.rand(3, 4) * (1 if i == 0 else -1),), 3, 1),
    ternary_on_tensor: (lambda i: (torch.rand(3, 4) * (1 if i == 0 else -1),), 3, 1),
    branch_on_all: (lambda i: (torch.rand(3, 4) + 0.1 if i == 0 else randn(3, 4) - 5,), 3, 1),
    while_halving: (lambda i: (torch.full((2, 2), 6.0) if i == 0 else torch.full((2, 2), 0.5),), 4, 4),
    and_of_tensor_conditions: (lambda i: (torch.rand(3, 4) + 0.6 if i == 0 else -torch.rand(3, 4),), 3, 2),
    assert_on_tensor: (mat, 2, 1),
    crc_of_bytes: (mat, 1, 1),
    numpy_function_on_array: (mat, 1, 3),
    pid_parity: (mat, 1, 1),
    math_of_item: (mat, 3, 1),
    explicit_break_twice: (mat, 3, 2),
    explicit_break_first: (mat, 1, 1),
    explicit_break_in_callee: (mat, 4, 2),  # relu | t + 1 | t * 2 | - 1
    break_then_python_values: (mat, 1, 1),
    break_keeps_locals_of_all_kinds: (lambda i: (randn(3, 4), randn(4)), 2, 1),
    break_in_range_loop: (mat, 4, 3),
    print_in_loop_over_tensors: (mat, 4, 3),
    break_in_enumerate_loop: (mat, 3, 3),
    break_in_zip_loop: (mat, 3, 3),
    break_in_nested_loops: (mat, 4, 4),
    python_break_after_graph_break: (mat, 2, 2),
    list_built_across_breaks: (mat, 4, 3),
    branch_on_tensor_in_loop: (lambda i: (torch.full((2,), 0.5 + i),), 4, 2),  # iterations share resume functions
    break_inside_no_grad: (mat_grad, 2, 1),
    print_inside_no_grad: (mat_grad, 2, 1),
    break_inside_set_grad_enabled: (mat_grad, 2, 1),
    break_after_no_grad_block: (mat_grad, 2, 1),
    backward_through_break: (mat_grad, 2, 1),
    break_inside_try: (mat, 2, 1),
    c_call_raising_into_user_handler: (mat, 0, 2),
    closure_read_after_break: (mat, 2, 1),
    closure_made_after_break: (mat, 1, 1),
    # LOAD_BUILD_CLASS, then the call of __build_class__, run in CPython; the class is
    # a new object on every call, guarded by identity: the last resume recompiles.
    class_defined_in_function: (mat, 2, 2),
    deleted_local_then_print: (mat, 1, 1),
}


@pytest.mark.parametrize("program", list(PROGRAMS), ids=[p.__name__ for p in PROGRAMS])
def test_program_split_by_graph_breaks(program):
    make_args, graphs, breaks = PROGRAMS[program]
    LOG_RECORDS.clear()
    check_graph_breaks(program, make_args, graphs=graphs, breaks=breaks)
    if program is logging_info_between_ops:
        # Eager, then compiled, on each of the two calls: the logger ran once per run.
        assert LOG_RECORDS == ["abs done"] * 4
    elif program is logging_with_arguments:
        assert LOG_RECORDS == ["summed 3 rows"] * 4


def grad_mode_switched_by_a_call(x):
    torch.set_grad_enabled(False)
    y = x * 2
    print("grad enabled:", torch.is_grad_enabled())
    torch.set_grad_enabled(True)
    return y, y.requires_grad, (x * 3).requires_grad


def test_grad_mode_set_by_a_plain_call_holds_across_the_break():
    check_graph_breaks(grad_mode_switched_by_a_call, mat_grad, graphs=2, breaks=1)
