"""More Python the capture traces through: functools.lru_cache / cache wrappers,
functools.wraps decorators and partial objects, classes and nn.Modules with their
own __getattr__ (and PEP 562 module __getattr__), and torch.autocast blocks."""
import functools
import types

import torch
import torch.nn as nn

import pytest
import surge
import surge.errors
from corpus_harness import CounterDelta, RecordingBackend, check_fn, compare_call, randn


@pytest.fixture(autouse=True)
def own_random_stream():
    # Later corpus files draw their inputs and weights from the global generator:
    # this file leaves its state as it found it.
    with torch.random.fork_rng():
        torch.manual_seed(0)
        yield


# ---- functools.lru_cache / functools.cache --------------------------------------

@functools.lru_cache(maxsize=None)
def scale_for(n):
    return 1.0 / n


@functools.cache
def offsets(n, shift):
    return tuple(float(i + shift) for i in range(n))


def uses_lru_cache(x):
    return x * scale_for(x.shape[0])


def uses_cache(x):
    return x + torch.tensor(offsets(x.shape[-1], 2))


def test_lru_cache_function_is_traced_through():
    backend = check_fn(uses_lru_cache, lambda i: randn(4), calls=3)
    assert backend.op_names() == ["mul"]
    report = surge.explain(uses_lru_cache)(randn(4))
    assert report.graph_break_count == 0 and report.graph_count == 1
    assert "['scale_for'] is <_lru_cache_wrapper" in report.guards[0], report.guards


def test_functools_cache_function_is_traced_through():
    check_fn(uses_cache, lambda i: randn(3, 5))


def test_lru_cache_wrapper_identity_is_guarded():
    global scale_for
    original = scale_for
    compiled = surge.compile(uses_lru_cache, backend=RecordingBackend())
    delta = CounterDelta()
    x = randn(4)
    torch.testing.assert_close(compiled(x), x / 4)
    try:
        scale_for = functools.lru_cache(maxsize=None)(lambda n: 2.0)
        torch.testing.assert_close(compiled(x), x * 2.0)
    finally:
        scale_for = original
    torch.testing.assert_close(compiled(x), x / 4)
    assert delta["graphs"] == 2 and delta["recompiles"] == 1 and delta["cache_hits"] == 1, delta


class CachedMethods:
    def __init__(self, k):
        self.k = k

    @functools.lru_cache(maxsize=None)
    def factor(self, n):
        return self.k * n


def test_lru_cache_method_on_an_object():
    def f(x, obj):
        return x * obj.factor(x.shape[0])

    check_fn(f, lambda i: (randn(3), CachedMethods(2.0)))


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) + 1
    return wrapper


@logged
def wrapped_block(x, w):
    return torch.relu(x @ w)


def test_functools_wraps_decorator_and_partial():
    def f(x, w):
        double = functools.partial(torch.mul, other=2.0)
        return double(wrapped_block(x, w)) + functools.partial(torch.add, alpha=3)(x, x).sum()

    backend = check_fn(f, lambda i: (randn(3, 4), randn(4, 4)))
    assert {"relu", "mul", "add"} <= set(backend.op_names()), backend.op_names()


# ---- __getattr__ of classes, nn.Modules and Python modules ------------------------

class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("shift", torch.ones(4))

    def __getattr__(self, name):
        if name == "alpha":
            return 3.0
        return super().__getattr__(name)

    def forward(self, x):
        return self.lin(x) * self.alpha + self.shift + (1.0 if hasattr(self, "beta") else 0.0)


def test_module_getattr_is_traced_with_super_lookup():
    m = Scaled()
    compiled = surge.compile(m, backend=RecordingBackend())
    delta = CounterDelta()
    for _ in range(2):
        compare_call(compiled, m, randn(2, 4))
    assert delta["graphs"] == 1 and delta["graph_breaks"] == 0 and delta["fallbacks"] == 0, delta
    report = surge.explain(m)(randn(2, 4))
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    # Gradients flow to the parameters reached through super().__getattr__.
    x = randn(2, 4)
    compiled(x).sum().backward()
    assert m.lin.weight.grad is not None


def test_module_getattr_guards_a_later_instance_attribute():
    m = Scaled()
    compiled = surge.compile(m, backend=RecordingBackend())
    delta = CounterDelta()
    compare_call(compiled, m, randn(2, 4))
    m.alpha = -5.0  # normal lookup now finds it: __getattr__ is not called
    compare_call(compiled, m, randn(2, 4))
    m.beta = 1  # hasattr(self, "beta") turns True
    compare_call(compiled, m, randn(2, 4))
    assert delta["graphs"] == 3 and delta["recompiles"] == 2, delta


class Config:
    def __init__(self, **values):
        self.values = values

    def __getattr__(self, name):
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


def test_plain_class_getattr_and_missing_attribute():
    def f(x, cfg):
        y = x * cfg.scale
        return y + 1 if getattr(cfg, "bias", None) is None else y + cfg.bias

    check_fn(f, lambda i: (randn(3), Config(scale=2.0)))
    backend = RecordingBackend()
    compiled = surge.compile(f, backend=backend)
    delta = CounterDelta()
    compare_call(compiled, f, (randn(3), Config(scale=2.0)))
    compare_call(compiled, f, (randn(3), Config(scale=2.0, bias=4.0)))
    compare_call(compiled, f, (randn(3), Config(scale=-1.0, bias=4.0)))
    assert delta["graphs"] == 3 and delta["fallbacks"] == 0, delta


lazy_settings = types.ModuleType("lazy_settings")
exec("def __getattr__(name):\n"
     "    if name == 'gain':\n"
     "        return GAINS['default']\n"
     "    raise AttributeError(name)\n"
     "GAINS = {'default': 2.0}\n", lazy_settings.__dict__)


def test_module_level_getattr_pep562():
    def f(x):
        return x * lazy_settings.gain

    compiled = surge.compile(f, backend=RecordingBackend())
    delta = CounterDelta()
    x = randn(3)
    torch.testing.assert_close(compiled(x), x * 2.0)
    torch.testing.assert_close(compiled(x), x * 2.0)
    lazy_settings.GAINS["default"] = 5.0
    try:
        torch.testing.assert_close(compiled(x), x * 5.0)
        lazy_settings.gain = 7.0  # a real global now shadows the hook
        torch.testing.assert_close(compiled(x), x * 7.0)
    finally:
        lazy_settings.GAINS["default"] = 2.0
        del lazy_settings.gain
    assert delta["graphs"] == 3 and delta["cache_hits"] == 1 and delta["fallbacks"] == 0, delta


def test_finally_and_reraise_inside_captured_code():
    def f(x, log):
        try:
            try:
                y = x * 2
                raise ValueError("inner")
            finally:
                log.append("inner finally")
        except ValueError:
            y = x * 3
        return y

    backend = check_fn(f, lambda i: (randn(3), []))
    assert backend.op_names() == ["mul", "mul"]


# ---- torch.autocast ------------------------------------------------------------------

def assert_same_dtypes_and_values(actual, expected):
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype, (a.dtype, e.dtype)
        torch.testing.assert_close(a, e, rtol=2e-2, atol=2e-2)


def autocast_block(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = torch.relu(y) + x
        with torch.autocast("cpu", enabled=False):
            q = z.float() @ w
    return y, z, q, y.float().softmax(-1) + 1


def amp_spellings(x, w):
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
    with torch.cpu.amp.autocast():
        b = torch.mm(x, w)
    return a, b


@torch.autocast("cpu", dtype=torch.bfloat16)
def decorated_matmul(x, w):
    return torch.addmm(x, x, w)


def calls_decorated(x, w):
    return decorated_matmul(x, w).float() * 2


def autocast_break(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        surge.graph_break()
        z = y @ w
    return z.float() + 1, y


def grads_of(fn, x, w):
    outs = fn(x, w)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return outs, torch.autograd.grad(sum(o.float().sum() for o in outs), (x, w))


@pytest.mark.filterwarnings("ignore:`torch.cpu.amp.autocast")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "cpp"])
@pytest.mark.parametrize("program,graphs,breaks", [
    (autocast_block, 1, 0), (amp_spellings, 1, 0), (calls_decorated, 1, 0), (autocast_break, 2, 1)])
def test_autocast_forward_and_backward(backend, program, graphs, breaks):
    compiled = surge.compile(program, backend=backend)
    delta = CounterDelta()
    for _ in range(2):
        x, w = randn(4, 8, requires_grad=True), randn(8, 8, requires_grad=True)
        outs, grads = grads_of(compiled, x, w)
        expected, expected_grads = grads_of(program, x, w)
        assert_same_dtypes_and_values(outs, expected)
        assert_same_dtypes_and_values(grads, expected_grads)
        assert not torch.is_autocast_enabled("cpu")
    assert delta["graphs"] == graphs and delta["graph_breaks"] == breaks and delta["fallbacks"] == 0, delta


def test_autocast_casts_reach_the_aten_graph():
    from surge.aot import trace_aten

    backend = RecordingBackend()
    compiled = surge.compile(autocast_block, backend=backend)
    x, w = randn(4, 8), randn(8, 8)
    compiled(x, w)
    names = [n.target for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    assert names[0] is torch.amp.autocast_mode._enter_autocast and names.count(torch.amp.autocast_mode._exit_autocast) == 2
    aten = trace_aten(backend.graphs[0], backend.example_inputs[0])
    casts = [n.kwargs.get("dtype") for n in aten.graph.nodes if n.target is torch.ops.aten._to_copy.default]
    assert torch.bfloat16 in casts and torch.float32 in casts, casts
    # The meta run inside the capture already knew the matmul's dtype.
    matmul = next(n for n in backend.graphs[0].graph.nodes if n.target is torch.matmul or str(n.target) == "<built-in function matmul>")
    assert matmul.meta["val"].dtype == torch.bfloat16


def test_entry_outside_autocast_is_not_reused_inside():
    def f(x, w):
        return x @ w + 1

    compiled = surge.compile(f, backend=RecordingBackend())
    delta = CounterDelta()
    x, w = randn(4, 8), randn(8, 8)
    assert compiled(x, w).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = compiled(x, w)
        inside_again = compiled(x, w)
        expected = f(x, w)
    assert inside.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(inside, expected)
    torch.testing.assert_close(inside_again, expected)
    with torch.autocast("cpu", dtype=torch.float16):
        assert compiled(x, w).dtype == torch.float16
    assert compiled(x, w).dtype == torch.float32
    assert delta["graphs"] == 3 and delta["recompiles"] == 2 and delta["cache_hits"] == 2, delta
    assert delta["fallbacks"] == 0, delta


@pytest.mark.parametrize("backend", ["aot_eager", "cpp"])
def test_training_a_module_called_inside_autocast(backend):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    compiled = surge.compile(model, backend=backend)
    delta = CounterDelta()
    for _ in range(2):
        x = randn(5, 8)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, ref = compiled(x), model(x)
        assert out.dtype == ref.dtype == torch.bfloat16
        torch.testing.assert_close(out, ref)
        got = torch.autograd.grad(out.float().sum(), list(model.parameters()))
        want = torch.autograd.grad(ref.float().sum(), list(model.parameters()))
        assert_same_dtypes_and_values(got, want)
    assert delta["graphs"] == 1 and delta["fallbacks"] == 0 and delta["cache_hits"] == 1, delta


def test_autocast_block_between_plain_ops_is_one_graph():
    def f(x):
        y = x * 2
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = y @ y.t()
        return z.float() + 1, z.dtype

    check_fn(f, lambda i: randn(3, 4))
    report = surge.explain(f)(randn(3, 4))
    assert report.graph_count == 1 and report.graph_break_count == 0 and not report.fallbacks


def _fails_when_traced(t):
    raise RuntimeError("cannot trace this")


def test_aot_trace_failing_inside_autocast_leaves_autocast_off():
    from surge.aot import trace_aten
    from torch.amp.autocast_mode import _enter_autocast, _exit_autocast

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    mode = graph.call_function(_enter_autocast, ("cpu", torch.bfloat16, True, True))
    y = graph.call_function(torch.matmul, (x, x))
    z = graph.call_function(_fails_when_traced, (y,))
    graph.call_function(_exit_autocast, (mode,))
    graph.output((z,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(surge.errors.Unsupported, match="cannot trace this"):
        trace_aten(gm, [randn(3, 3)])
    assert not torch.is_autocast_enabled("cpu")


def test_error_inside_a_compiled_autocast_region_leaves_autocast_off():
    def f(x, w, index):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            z = y.index_select(0, index)  # an index out of range raises when the graph runs
        return z.float()

    compiled = surge.compile(f, backend="eager")
    delta = CounterDelta()
    x, w = randn(4, 4), randn(4, 4)
    torch.testing.assert_close(compiled(x, w, torch.tensor([1, 3])), f(x, w, torch.tensor([1, 3])))
    with pytest.raises(IndexError):
        compiled(x, w, torch.tensor([1, 30]))
    assert not torch.is_autocast_enabled("cpu")
    assert delta["graphs"] == 1 and delta["cache_hits"] == 1, delta
