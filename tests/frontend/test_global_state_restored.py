"""torch's global state is the same after a capture as before it, on every exit path:
torch.func transforms run in CPython (a graph break), and anything a capture changes
(here: a backend that leaks state) is put back and named."""
import pytest
import torch

import surge
from frontend_helpers import compile_strict, same
from surge.frontend.global_state import GlobalStateLeak, snapshot


def _backward_works():
    w = torch.randn(3, requires_grad=True)
    (w * 2).sum().backward()
    torch.testing.assert_close(w.grad, torch.full((3,), 2.0))


def test_torch_func_grad_breaks_and_leaves_no_functorch_level():
    def f(x):
        g = torch.func.grad(lambda t: (t ** 2).sum())(x)
        return g + 1

    before = snapshot()
    compiled, rec = compile_strict(f)
    for _ in range(2):
        x = torch.randn(4)
        same(compiled(x), f(x))
    assert snapshot() == before
    assert torch._C._functorch.maybe_current_level() is None
    assert surge.counters["graph_breaks"] >= 1 and surge.counters["fallbacks"] == 0
    _backward_works()


def test_torch_func_under_fullgraph_is_an_error_and_leaves_no_level():
    def f(x):
        return torch.func.vmap(torch.sin)(x)

    compiled = surge.compile(f, backend="eager", fullgraph=True)
    with pytest.raises(Exception, match="functorch"):
        compiled(torch.randn(2, 3))
    assert torch._C._functorch.maybe_current_level() is None
    _backward_works()


def _leaking_backend(leak):
    def backend(gm, example_inputs):
        leak()
        return gm.forward
    return backend


def test_a_capture_that_leaks_state_is_restored_and_named():
    def f(x):
        return x.sin() + 1

    before = snapshot()
    strict = surge.compile(f, backend=_leaking_backend(torch._C._functorch._grad_increment_nesting),
                           options={"raise_internal_errors": True})
    with pytest.raises(GlobalStateLeak, match="functorch level"):
        strict(torch.randn(3))
    assert snapshot() == before
    surge.reset()
    # Without raise_internal_errors the frame runs eagerly, announced as a fallback.
    lenient = surge.compile(f, backend=_leaking_backend(lambda: torch.use_deterministic_algorithms(True)))
    x = torch.randn(3)
    same(lenient(x), f(x))
    assert snapshot() == before and surge.counters["fallbacks"] == 1
    _backward_works()


def test_state_is_restored_when_the_capture_fails_or_breaks():
    def leak_and_fail():
        torch._C._set_fwd_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        raise RuntimeError("backend failed")

    def f(x):
        return x.cos() * 2

    before = snapshot()
    compiled = surge.compile(f, backend=_leaking_backend(leak_and_fail))
    x = torch.randn(3)
    same(compiled(x), f(x))
    assert snapshot() == before

    def g(x):
        y = x + 1
        surge.graph_break()
        return y * 2

    surge.reset()
    compiled = surge.compile(g, backend=_leaking_backend(lambda: torch.set_autocast_enabled("cpu", True)))
    same(compiled(x), g(x))
    assert snapshot() == before


def test_a_compiled_function_called_inside_torch_func_runs_eagerly_there():
    def f(x):
        return (x.sin() * 2).sum()

    compiled = surge.compile(f)  # the default backend: its kernels cannot read functorch wrappers
    x = torch.randn(4)
    same(compiled(x), f(x))
    batch = torch.randn(3, 4)
    same(torch.func.vmap(compiled)(batch), torch.func.vmap(f)(batch))
    same(torch.func.grad(compiled)(x), torch.func.grad(f)(x))
    same(compiled(x), f(x))
    assert surge.counters["fallbacks"] == 1  # one entry: "inside a transform, run eagerly"
    assert torch._C._functorch.maybe_current_level() is None


class TimesTen(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 10 if func is torch.add else out


def _add_one(x):
    return torch.add(x, 1) * 2


def _mode_inside(x):
    with TimesTen():
        y = torch.add(x, 1)
    return y + 1


def test_a_torch_function_mode_around_a_compiled_call_runs_it_eagerly_there():
    compiled = surge.compile(_add_one, backend="aot_eager", options={"warn_fallbacks": False})
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), _add_one(x))
    with TimesTen():
        expected = _add_one(x)
        torch.testing.assert_close(compiled(x), expected)  # not the entry captured without the mode
    torch.testing.assert_close(compiled(x), _add_one(x))
    assert torch._C._len_torch_function_stack() == 0
    assert surge.counters["graphs"] == 1 and surge.counters["fallbacks"] == 1


def test_a_torch_function_mode_entered_inside_a_compiled_function():
    compiled = surge.compile(_mode_inside, backend="aot_eager", options={"warn_fallbacks": False})
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), _mode_inside(x))
        assert torch._C._len_torch_function_stack() == 0
