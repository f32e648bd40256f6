"""Graph breaks inside blocks: `with` statements (grad modes, user context managers,
nested in loops and other blocks), try/except/finally, and exceptions raised by the
user's code or by torch. Each program is compared with eager on fresh inputs with
the number of graphs and breaks over two calls; a program that raises must raise
eager's exception, with a traceback that names the user's line."""
import contextlib

import pytest
import torch

import surge
from breaks_corpus import check_raises_like_eager, expected_counts, mat, mat_grad
from corpus_harness import RecordingBackend, check_graph_breaks, randn

# ---- grad-mode blocks ---------------------------------------------------------------


def no_grad_in_loop(x):
    for i in range(2):
        with torch.no_grad():
            x = x * 2
            surge.graph_break()
            x = x + i
    return x, x.requires_grad


def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
            surge.graph_break()
            c = b + 1
    return a, c, a.requires_grad, c.requires_grad


def print_in_nested_grad_blocks(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
            print("inner", torch.is_grad_enabled())
            z = y + 1
        w = z * 3
    return w, z.requires_grad, w.requires_grad


def set_grad_enabled_false_in_loop(x):
    out = x
    for _ in range(2):
        with torch.set_grad_enabled(False):
            out = out * 2
            print("grad", torch.is_grad_enabled())
    return out, out.requires_grad


def break_after_block_in_loop(x):
    for i in range(2):
        with torch.no_grad():
            y = x * i
        surge.graph_break()
        x = x + y
    return x


def no_grad_then_break_then_grad(x):
    with torch.no_grad():
        a = x.sin()
    print("between blocks", torch.is_grad_enabled())
    with torch.enable_grad():
        b = x.cos()
    return a, b, a.requires_grad, b.requires_grad


def block_in_if_branch(x, flag):
    if flag:
        with torch.no_grad():
            y = x * 2
            print("flag")
    else:
        y = x * 3
    return y, y.requires_grad


def three_nested_blocks(x):
    with torch.no_grad():
        with torch.enable_grad():
            with torch.no_grad():
                y = x * 2
                surge.graph_break()
                z = y + 1
            w = x * 4
        v = w + z
    return v, w.requires_grad, v.requires_grad


def with_as_target(x):
    with torch.no_grad() as ctx:
        y = x * 2
        surge.graph_break()
    return y, ctx is None


def item_inside_no_grad(x):
    with torch.no_grad():
        scale = x.abs().max().item()
        y = x / (scale + 1)
    return y, y.requires_grad


def backward_through_break_inside_enable_grad(x):
    with torch.enable_grad():
        y = x.sin()
        print("mid")
        z = (y * y).sum()
    return z


@torch.no_grad()
def no_grad_decorated_root(x):
    y = x * 2
    print("decorated", torch.is_grad_enabled())
    return y + 1, y.requires_grad


@torch.enable_grad()
def enable_grad_decorated_root(x):
    y = x * 2
    surge.graph_break()
    return y.sum(), y.requires_grad


# ---- user context managers ----------------------------------------------------------


class Tracker:
    def __init__(self, tag, log):
        self.tag = tag
        self.log = log

    def __enter__(self):
        self.log.append(("enter", self.tag))
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", self.tag, exc[0] is not None))
        return False


def user_manager_around_break(x, log):
    with Tracker("a", log):
        y = x * 2
        surge.graph_break()
        z = y + 1
    return z


def user_manager_as_target(x, log):
    with Tracker("b", log) as t:
        y = x * 2
        print("tag", t.tag)
    return y, t.tag


def user_manager_inside_no_grad(x, log):
    with torch.no_grad():
        with Tracker("c", log):
            y = x * 2
            surge.graph_break()
    return y, y.requires_grad


def user_manager_in_loop(x, log):
    for k in range(2):
        with Tracker(k, log):
            x = x + k
            print("step", k)
    return x


class Swallow:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append(("swallowed", exc_type.__name__ if exc_type else None))
        return True


def user_manager_swallows_error_after_break(x, log):
    y = x
    with Swallow(log):
        y = x * 2
        surge.graph_break()
        raise KeyError("dropped")
    return y + 1


@contextlib.contextmanager
def _logged(log, tag):
    log.append(("in", tag))
    try:
        yield tag
    finally:
        log.append(("out", tag))


def contextmanager_around_break(x, log):
    with _logged(log, "a"):
        y = x.sin()
        print("mid")
        z = y.cos()
    return z


def contextmanager_value_used_after_break(x, log):
    with _logged(log, "b") as tag:
        y = x * 2
        surge.graph_break()
        log.append(tag)
    return y + len(tag)


def contextmanager_in_loop_with_break(x, log):
    for k in range(2):
        with _logged(log, k):
            x = x + k
            surge.graph_break()
    return x


# ---- try / except / finally ---------------------------------------------------------


def break_inside_try(x):
    try:
        y = x * 2
        print("in try")
        y = y + 1
    except ValueError:
        y = x
    return y


def break_then_raise_caught(x):
    try:
        y = x * 2
        print("try")
        raise ValueError("boom")
    except ValueError as e:
        y = y + len(str(e))
    return y


def break_inside_finally(x):
    try:
        y = x + 1
    finally:
        print("finally")
    return y * 2


def break_inside_try_with_finally(x, log):
    try:
        y = x.sin()
        surge.graph_break()
    finally:
        log.append("finally")
    return y


def break_in_except_handler(x):
    try:
        raise KeyError("k")
    except KeyError:
        print("handled")
        y = x + 1
    return y


def torch_error_caught_by_user(x):
    try:
        y = x @ x
    except RuntimeError:
        y = x * 0
    return y + 1


def try_in_loop_with_break(x):
    total = x * 0
    for k in range(3):
        try:
            if k == 1:
                raise IndexError(k)
            total = total + x * k
            surge.graph_break()
        except IndexError:
            total = total - 1
    return total


def nested_try_with_break(x, log):
    try:
        try:
            y = x * 2
            print("inner")
            raise ValueError("inner")
        finally:
            log.append("inner finally")
    except ValueError:
        y = x * 3
    return y


def return_inside_try_after_break(x, log):
    try:
        y = x.exp()
        surge.graph_break()
        return y + 1
    finally:
        log.append("cleanup")


def except_else_after_break(x):
    try:
        y = x * 2
        print("try body")
    except ValueError:
        y = x
    else:
        y = y + 10
    return y


def with_inside_try_inside_loop(x, log):
    for k in range(2):
        try:
            with torch.no_grad():
                x = x * 2
                surge.graph_break()
        finally:
            log.append(k)
    return x


def with_log(make_args):
    return lambda i: (*make_args(i), [])


PROGRAMS = {
    # program: (make_args, (graphs, breaks) over two calls); `log` arguments are
    # compared with eager's after each call
    # x * 2 | + i (the loop's next iteration is a split) | x * 2 | + i again once i
    # changed (then symbolic): every iteration runs the same resume functions
    no_grad_in_loop: (mat_grad, (4, 2)),
    enable_grad_inside_no_grad: (mat_grad, (2, 1)),
    print_in_nested_grad_blocks: (mat_grad, (2, 1)),
    set_grad_enabled_false_in_loop: (mat_grad, (2, 2)),
    break_after_block_in_loop: (mat_grad, (3, 2)),
    no_grad_then_break_then_grad: (mat_grad, (2, 1)),
    block_in_if_branch: (lambda i: (randn(3, requires_grad=True), i == 0), (2, 1)),
    three_nested_blocks: (mat_grad, (2, 1)),
    with_as_target: (mat_grad, (1, 1)),
    item_inside_no_grad: (mat_grad, (3, 1)),
    backward_through_break_inside_enable_grad: (mat_grad, (2, 1)),
    no_grad_decorated_root: (mat_grad, (2, 1)),
    enable_grad_decorated_root: (mat_grad, (2, 1)),
    user_manager_around_break: (with_log(mat), (2, 1)),
    user_manager_as_target: (with_log(mat), (1, 1)),
    user_manager_inside_no_grad: (with_log(mat_grad), (1, 1)),
    user_manager_in_loop: (with_log(mat), (2, 2)),
    # The resume function captures the raise, the manager's __exit__ swallowing it, and y + 1.
    user_manager_swallows_error_after_break: (with_log(mat), (2, 1)),
    contextmanager_around_break: (with_log(mat), (2, 4)),
    contextmanager_value_used_after_break: (with_log(mat), (2, 4)),
    contextmanager_in_loop_with_break: (with_log(mat), (2, 6)),  # the second iteration's splits are the first's
    break_inside_try: (mat, (2, 1)),
    break_then_raise_caught: (mat, (2, 1)),
    break_inside_finally: (mat, (2, 1)),
    break_inside_try_with_finally: (with_log(mat), (1, 1)),
    break_in_except_handler: (mat, (1, 1)),
    # The matmul fails on metadata: CPython runs it, and the user's handler, eagerly.
    torch_error_caught_by_user: (mat, (0, 1)),
    try_in_loop_with_break: (mat, (3, 2)),  # total + x * k again once k changed (then symbolic)
    # The resume function captures the `raise`, the finally and the handler.
    nested_try_with_break: (with_log(mat), (2, 1)),
    return_inside_try_after_break: (with_log(mat), (2, 1)),
    except_else_after_break: (mat, (2, 1)),
    with_inside_try_inside_loop: (with_log(mat_grad), (2, 2)),
}


@pytest.mark.parametrize("program", list(PROGRAMS), ids=[p.__name__ for p in PROGRAMS])
def test_break_inside_a_block(program):
    make_args, *counts = PROGRAMS[program]
    graphs, breaks = expected_counts(*counts)
    check_graph_breaks(program, make_args, graphs=graphs, breaks=breaks)
    assert torch.is_grad_enabled()


def test_gradients_through_a_break_inside_enable_grad():
    x = randn(3, 4, requires_grad=True)
    compiled = surge.compile(backward_through_break_inside_enable_grad)
    (grad,) = torch.autograd.grad(compiled(x), [x])
    (eager_grad,) = torch.autograd.grad(backward_through_break_inside_enable_grad(x), [x])
    torch.testing.assert_close(grad, eager_grad)


# ---- blocks whose mode capture does not model ----------------------------------------


def inference_mode_block(x):
    y = x.sin()
    with torch.inference_mode():
        z = y * 2
    return z + 1, z.is_inference()


@pytest.mark.parametrize("program", [inference_mode_block])
def test_unmodeled_mode_block_runs_eagerly_after_the_prefix(program):
    backend = RecordingBackend()
    compiled = surge.compile(program, backend=backend)
    for _ in range(2):
        x = randn(3, 4)
        actual, expected = compiled(x), program(x.clone())
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1:] == expected[1:]
    # The prefix is a graph; the frame splits at the block, and the function's rest,
    # called inside the block, runs eagerly (once captured, then from its cache entry).
    assert len(backend.graphs) == 1 and surge.counters["fallbacks"] == 1
    # Called outside any such block, the same program captures as usual.
    assert not torch.is_inference_mode_enabled()


# ---- exceptions raised in captured code ---------------------------------------------


def raise_value_error_in_captured_code(x):
    y = x * 2
    if y.shape[0] == 3:
        raise ValueError(f"bad rows: {y.shape[0]}")  # RAISES
    return y


def matmul_of_mismatched_shapes(x):
    y = x.sin()
    return y @ y  # RAISES


def view_of_wrong_size(x):
    return x.view(5, 7) + 1  # RAISES


def raise_after_a_break(x):
    y = x.cos()
    print("before raising")
    raise RuntimeError(f"after the break, {y.dim()} dims")  # RAISES


def _callee_raises(t):
    surge.graph_break()
    return t.reshape(7)  # RAISES


def raise_inside_a_callee_after_its_break(x):
    return _callee_raises(x * 2) + 1


def index_out_of_range(x):
    rows = list(x.unbind(0))
    return rows[10]  # RAISES


def key_error_from_dict(x):
    table = {"a": x}
    return table["b"]  # RAISES


def raise_inside_no_grad_block(x):
    with torch.no_grad():
        y = x * 2
        surge.graph_break()
        raise ValueError(f"inside no_grad, requires_grad={y.requires_grad}")  # RAISES


RAISING = [raise_value_error_in_captured_code, matmul_of_mismatched_shapes, view_of_wrong_size,
           raise_after_a_break, raise_inside_a_callee_after_its_break, index_out_of_range, key_error_from_dict,
           raise_inside_no_grad_block]


@pytest.mark.parametrize("program", RAISING, ids=[p.__name__ for p in RAISING])
def test_exception_is_eagers_and_names_the_user_line(program, capsys):
    x = randn(3, 4, requires_grad=True)
    check_raises_like_eager(program, (x,), "# RAISES")
    # Grad mode is restored after an exception escapes a re-entered block.
    assert torch.is_grad_enabled()
    # The prefix ran as a graph and the raising instruction in CPython: nothing fell back.
    assert surge.counters["fallbacks"] == 0 and surge.counters["graph_breaks"] >= 1
