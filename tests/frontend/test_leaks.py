"""Compiled code keeps no more alive than eager does: tensors of a call that raised
are freed when the exception is dropped (no reference cycle through the traceback),
a module passed as an argument dies with its last user reference (the cache holds it
weakly and drops the entry), and ``locals()`` shows the user's names only."""
import gc
import weakref

import pytest
import torch

import surge
from frontend_helpers import compile_strict, same


@pytest.fixture
def no_gc():
    """Cycles would survive: what is alive afterwards is held by references only."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def break_then_raise(x):
    y = x * 2
    print("break")
    raise ValueError("boom")


def raise_after_the_graph(x):
    y = x * 2
    if x.shape[0] > 1:
        raise KeyError("k")
    return y


def raise_from_an_operation(x):
    y = x * 2
    return {}["missing"]


def caught_inside(x):
    try:
        t = x * 3
        raise KeyError("k")
    except KeyError:
        return x + 1


@pytest.mark.parametrize("fn,backend", [(fn, "eager") for fn in (
    break_then_raise, raise_after_the_graph, raise_from_an_operation, caught_inside)] + [(raise_after_the_graph, None)])
def test_tensors_of_a_call_that_raised_are_freed(no_gc, fn, backend, capsys):
    compiled = surge.compile(fn, backend=backend)
    calls = (fn, compiled, compiled, compiled)
    if backend is None:
        # The aot layer's tracer keeps its example inputs in a reference cycle while it
        # compiles (freed by the garbage collector): the checks start after the compile.
        _raises(compiled)
        gc.collect()
    for impl in calls:
        x = torch.randn(4)
        alive = weakref.ref(x)
        try:
            impl(x)
        except Exception:
            pass
        del x
        assert alive() is None, f"{'eager' if impl is fn else 'surge'} call kept its input alive"


def _raises(fn):
    try:
        fn(torch.randn(4))
    except Exception:
        pass


class Scale(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * self.k


def apply(module, x):
    return module(x)


@pytest.mark.parametrize("backend", ["eager", None])
def test_a_module_argument_dies_with_its_last_reference(no_gc, backend):
    compiled = surge.compile(apply, backend=backend)
    module = Scale(2.0)
    x = torch.randn(2, 3)
    same(compiled(module, x), apply(module, x))
    alive = weakref.ref(module)
    del module
    assert alive() is None
    # The entry binds the call's module and checks it is alike: it outlives the module
    # without holding it, and serves the next alike one.
    graphs = surge.counters["graphs"]
    other = Scale(2.0)
    same(compiled(other, x), apply(other, x))
    assert surge.counters["graphs"] == graphs and surge.counters["recompiles"] == 0
    del compiled


def test_after_the_module_died_a_new_one_is_captured_and_correct():
    compiled, rec = compile_strict(apply)
    x = torch.randn(2, 3)
    for k in (2.0, 3.0):
        module = Scale(k)
        same(compiled(module, x), apply(module, x))
        same(compiled(module, x), apply(module, x))
        del module
        gc.collect()
    # Scale(3.0) is not alike Scale(2.0) (its k is guarded by value): a second entry.
    assert len(rec.graphs) == 2 and len(compiled._surge_cache.entries) == 2
    assert surge.counters["recompiles"] == 1


def test_a_function_argument_is_held_weakly():
    def call(f, x):
        return f(x) + 1

    compiled, _ = compile_strict(call)
    namespace = {}
    exec("def double(t):\n    return t * 2\n", namespace)  # a top-level function: guarded by identity
    f = namespace.pop("double")
    x = torch.randn(3)
    same(compiled(f, x), call(f, x))
    alive = weakref.ref(f)
    del f
    gc.collect()
    assert alive() is None


def test_locals_shows_the_users_names_only(capsys):
    def f(x):
        y = x + 1
        print(sorted(locals()))
        z = y * 2
        return z, sorted(locals())

    compiled = surge.compile(f, backend="eager")
    x = torch.randn(2)
    expected = f(x)
    eager_out = capsys.readouterr().out
    for _ in range(2):
        same(compiled(x), expected)
        assert capsys.readouterr().out == eager_out
    assert surge.counters["graph_breaks"] >= 1
