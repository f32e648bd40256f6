"""torch's default device (``torch.set_default_device``, ``with torch.device(...)``) is
captured as torch.compile captures it: factories without a device get the mode's device
in the graph, the mode is guarded (a new default device recompiles), and blocks and
``set_default_device`` inside the frame leave torch's mode stack as eager leaves it, also
across graph breaks and exceptions. Devices here are the CPU, ``cpu:0`` (another device
to the guards, the same memory) and meta."""
from __future__ import annotations

import contextlib

import pytest
import torch

import surge
from frontend_helpers import compile_strict, same
from surge.frontend.global_state import default_device_context, device_modes

META = torch.device("meta")


def _reset_device_state():
    """No mode and no default device (torch.set_default_device(None) may push a context
    back: the states these tests make are torch's odd ones too)."""
    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()
    torch._GLOBAL_DEVICE_CONTEXT.device_context = None


@pytest.fixture(autouse=True)
def _no_default_device():
    _reset_device_state()
    yield
    _reset_device_state()


def _factory_devices(recorder, index=-1) -> list:
    return [n.kwargs.get("device") for n in recorder.graphs[index].graph.nodes
            if n.op == "call_function" and n.target in (torch.ones, torch.zeros, torch.arange, torch.full)]


def _makes(x):
    return x + torch.ones(3), torch.zeros(2), torch.arange(3, device="cpu")


def test_a_call_under_set_default_device_is_captured_with_the_device_in_the_graph():
    compiled, rec = compile_strict(_makes)
    x = torch.randn(3)
    torch.set_default_device("cpu:0")
    same(compiled(x), _makes(x))
    assert len(rec.graphs) == 1 and surge.counters["fallbacks"] == 0
    assert _factory_devices(rec) == [torch.device("cpu", 0), torch.device("cpu", 0), "cpu"]
    same(compiled(x), _makes(x))
    assert surge.counters["cache_hits"] == 1 and len(rec.graphs) == 1


def test_a_new_default_device_recompiles():
    def made(x):
        return torch.zeros(2), x.sum()

    compiled, rec = compile_strict(made)
    x = torch.randn(3)
    for mode in (contextlib.nullcontext(), torch.device("meta"), torch.device("cpu:0"), contextlib.nullcontext()):
        with mode:
            out, expected = compiled(x), made(x)
        assert out[0].device == expected[0].device
        same(out[1], expected[1])
    assert len(rec.graphs) == 3 and surge.counters["recompiles"] == 2 and surge.counters["cache_hits"] == 1
    assert [d for i in range(3) for d in _factory_devices(rec, i)] == [None, META, torch.device("cpu", 0)]


def test_nested_device_modes_give_factories_the_innermost_device():
    def made(x):
        return torch.ones(2), x * 2

    compiled, rec = compile_strict(made)
    x = torch.randn(3)
    torch.set_default_device("cpu:0")
    with torch.device("meta"):
        out = compiled(x)
    assert out[0].device == META and _factory_devices(rec) == [META]
    assert device_modes() == (torch.device("cpu", 0),)


def _block(x):
    with torch.device("meta") as dev:
        inner = torch.zeros(2)
        explicit = torch.zeros(2, device="cpu")
    return x + torch.ones(3), inner.device, explicit, dev


def test_a_device_block_in_the_frame():
    compiled, rec = compile_strict(_block)
    x = torch.randn(3)
    same(compiled(x), _block(x))
    assert len(rec.graphs) == 1 and surge.counters["graph_breaks"] == 0
    assert _factory_devices(rec) == [META, "cpu", None]
    assert device_modes() == ()


def _set_inside(x):
    before = torch.get_default_device()
    torch.set_default_device("meta")
    made = torch.zeros(2)
    return x + 1, made.device, before, torch.get_default_device()


def _outcome_and_state(fn, x, setup):
    """``fn(x)`` (its result or the type of what it raised) and torch's device state after
    it, starting from ``setup()`` (a context manager)."""
    _reset_device_state()
    with setup():
        try:
            out = fn(x)
        except Exception as e:
            out = type(e)
        state = (device_modes(), default_device_context())
    return out, state, (device_modes(), default_device_context())


def _default_cpu():
    torch.set_default_device("cpu")
    return contextlib.nullcontext()


def _default_cpu_and_meta_block():
    torch.set_default_device("cpu")
    return torch.device("meta")


@pytest.mark.parametrize("setup", [contextlib.nullcontext, _default_cpu, lambda: torch.device("meta"),
                                   _default_cpu_and_meta_block],
                         ids=["none", "default cpu", "meta block", "default cpu and meta block"])
def test_set_default_device_in_the_frame_leaves_the_state_eager_leaves(setup):
    def unset(x):
        torch.set_default_device(None)
        return torch.ones(1).device, torch.get_default_device(), x + 1

    for fn in (_set_inside, unset):
        surge.reset()
        compiled, rec = compile_strict(fn)
        x = torch.randn(3)
        expected = _outcome_and_state(fn, x, setup)
        for _ in range(2):
            same(_outcome_and_state(compiled, x, setup), expected)
        assert surge.counters["fallbacks"] == 0


def test_set_default_device_in_the_frame_is_one_graph():
    compiled, rec = compile_strict(_set_inside)
    x = torch.randn(3)
    compiled(x)
    assert len(rec.graphs) == 1 and surge.counters["graph_breaks"] == 0
    assert _factory_devices(rec) == [META]
    assert device_modes() == (META,)


def _break_in_block(x):
    with torch.device("meta"):
        a = torch.zeros(2)
        surge.graph_break()
        b = torch.ones(2)
        inside = torch.get_default_device()
    return x + 1, a.device, b.device, inside, torch.zeros(1).device


def test_a_graph_break_inside_a_device_block():
    compiled, _ = compile_strict(_break_in_block)
    x = torch.randn(3)
    same(compiled(x), _break_in_block(x))
    assert surge.counters["graph_breaks"] == 1 and surge.counters["fallbacks"] == 0
    assert device_modes() == ()


def _set_then_break(x):
    torch.set_default_device("meta")
    surge.graph_break()
    return x + 1, torch.zeros(1).device, torch.get_default_device()


def test_set_default_device_before_a_graph_break_is_in_force_at_the_break():
    compiled, _ = compile_strict(_set_then_break)
    x = torch.randn(3)
    expected = _set_then_break(x)
    torch.set_default_device(None)
    same(compiled(x), expected)
    assert surge.counters["graph_breaks"] == 1 and device_modes() == (META,)


def _caught_in_block(x):
    try:
        with torch.device("meta"):
            raise ValueError("inside")
    except ValueError:
        pass
    return x + 1, torch.zeros(1).device


def _raises_in_block(x):
    with torch.device("meta"):
        y = torch.zeros(2)
        raise KeyError(y.device)


def test_an_exception_leaving_a_device_block_pops_it():
    compiled, rec = compile_strict(_caught_in_block)
    x = torch.randn(3)
    same(compiled(x), _caught_in_block(x))
    assert len(rec.graphs) == 1 and device_modes() == ()
    compiled = surge.compile(_raises_in_block, backend="eager")
    with pytest.raises(KeyError) as raised:
        compiled(x)
    assert raised.value.args == (META,) and device_modes() == ()


class _Plain(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        made = torch.zeros(1).device  # torch pops the modes while their handler runs
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        return out, made if func is torch.add else out


def _disabled(x):
    with torch._C.DisableTorchFunction():
        off = torch.zeros(1).device, torch.get_default_device()
    with torch._C.DisableTorchFunctionSubclass():
        on = torch.zeros(1).device
    return off, on, torch.add(x, 1)[1]


def test_modes_off_for_disable_torch_function_and_inside_a_subclass_override():
    compiled, _ = compile_strict(_disabled)
    x = torch.randn(2).as_subclass(_Plain)
    with torch.device("meta"):
        expected = _disabled(x)
        assert compiled(x) == expected == ((torch.device("cpu"), torch.device("cpu")), META, torch.device("cpu"))


class _TimesTen(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 10 if func is torch.add else out


def test_another_mode_next_to_a_device_mode_still_runs_eagerly():
    def adds(x):
        return torch.add(x, 1)

    compiled = surge.compile(adds, backend="eager", options={"warn_fallbacks": False})
    x = torch.randn(2)
    torch.set_default_device("cpu")
    with _TimesTen():
        same(compiled(x), adds(x))
    same(compiled(x), adds(x))
    assert surge.counters["fallbacks"] == 1 and surge.counters["graphs"] == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_as_the_default_device_compiles_to_kernels():
    def made(x):
        y = torch.arange(4.0) * x.sum() + torch.ones(4)
        with torch.device("cpu"):
            z = torch.zeros(2)
        return y.sin(), z, torch.get_default_device()

    compiled = surge.compile(made)
    torch.set_default_device("cuda")
    for _ in range(2):
        x = torch.randn(3)
        out, expected = compiled(x), made(x)
        assert out[0].device.type == "cuda" and out[1].device.type == "cpu"
        torch.testing.assert_close(out[0], expected[0])
        assert out[2] == expected[2]
    assert surge.counters["fallbacks"] == 0 and surge.counters["kernels"] >= 1
    torch.set_default_device(None)
    same(compiled(torch.randn(3))[1], torch.zeros(2))  # a new default device: recompiled
    assert surge.counters["recompiles"] >= 1
