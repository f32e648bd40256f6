"""The entries' tensor checks in C++ (frontend/native_checks.py): the same answers as the
Python checks for every fact they compare, no crash on objects that are no strided
tensor, the switch from Python to C++ when the extension loads, and entries that
recompile when a parameter changes under them."""
import functools
import pickle

import pytest
import torch

import surge
from surge.frontend import native_checks
from surge.options import Options, default_cache_dir


@pytest.fixture(scope="module")
def extension():
    """The extension built (once per machine: it stays in the cache folder) and loaded."""
    native_checks.start(default_cache_dir(Options.from_env()), None)
    status = native_checks.wait(native_checks.BUILD_TIMEOUT_S)
    if status != "ready":
        pytest.skip("the tensor-check extension cannot be built here (SURGE_LOGS=perf says why)")
    return native_checks._STATE["module"]


def _captured():
    return [torch.randn(4, 8), torch.nn.Parameter(torch.randn(8, 8)), torch.randn(6, 4).t(),
            torch.zeros(2, 3, dtype=torch.int64), torch.randn(5, requires_grad=True), torch.randn(())]


def _implementations(extension):
    specs = [native_checks.spec_of(t) for t in _captured()]
    checks = native_checks.TensorChecks(specs)
    assert isinstance(checks.run, functools.partial)   # the C++ one: the extension is loaded
    return {"c++": checks.run, "python": native_checks._python_run(checks.specs)}


def _changed():
    """Each a call's tensors that differ from the captured ones in one fact."""
    yield "shape", lambda t: [torch.randn(4, 9)] + t[1:]
    yield "stride", lambda t: [t[0], t[1], t[2].contiguous()] + t[3:]
    yield "dtype", lambda t: t[:3] + [t[3].int()] + t[4:]
    yield "requires_grad", lambda t: t[:4] + [t[4].detach()] + t[5:]
    yield "class", lambda t: [t[0], t[1].detach()] + t[2:]
    yield "rank", lambda t: t[:5] + [torch.randn(1)]
    yield "count", lambda t: t[:5]
    yield "not a tensor", lambda t: t[:5] + [0.5]
    yield "sparse", lambda t: [torch.randn(4, 8).to_sparse()] + t[1:]
    yield "subclass", lambda t: t[:5] + [torch.randn(()).as_subclass(_Sub)]
    yield "device", lambda t: [torch.randn(4, 8, device="meta")] + t[1:]


class _Sub(torch.Tensor):
    pass


@pytest.mark.parametrize("which", ["c++", "python"])
def test_checks_pass_alike_tensors_and_fail_on_each_fact(extension, which):
    run = _implementations(extension)[which]
    assert run(*_captured())   # fresh tensors with the captured facts
    for fact, change in _changed():
        assert run(*change(_captured())) is False, fact


def test_checks_switch_to_cpp_when_the_extension_loads(extension, monkeypatch):
    library = extension.__file__   # the one loaded (another test may have named another compiler)
    monkeypatch.setitem(native_checks._STATE, "module", None)
    monkeypatch.setitem(native_checks._STATE, "status", "building")
    checks = native_checks.TensorChecks([native_checks.spec_of(t) for t in _captured()])
    assert checks.run(*_captured()) and checks.run.__name__ == "run"   # the Python loop meanwhile
    native_checks._load(library)
    assert native_checks._STATE["status"] == "ready"
    assert checks.run.func is extension.check and checks.run(*_captured())


def test_checks_pickle_as_their_specs(extension):
    checks = native_checks.TensorChecks([native_checks.spec_of(t) for t in _captured()])
    again = pickle.loads(pickle.dumps(checks))
    assert again.specs == checks.specs and again.run(*_captured())


def test_an_entry_recompiles_when_a_parameter_changes_under_it(extension):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    compiled = surge.compile(model, backend="eager")
    x = torch.randn(3, 8)
    torch.testing.assert_close(compiled(x), model(x))
    (source,) = [e.source for cache in list(surge.frontend.cache._ALL) for e in cache.entries]
    assert "5 tensors: " in source and ".stride() ==" not in source   # four parameters and x, in one call
    compiled(torch.randn(3, 8))
    assert surge.counters["recompiles"] == 0
    changes = [lambda: model[0].bias.requires_grad_(False),
               lambda: setattr(model[2].weight, "data", torch.randn(16, 4).t()),     # other strides
               lambda: setattr(model[0].weight, "data", torch.randn(16, 8).double().float().clone())]
    for k, change in enumerate(changes, start=1):
        change()
        x = torch.randn(3, 8)
        torch.testing.assert_close(compiled(x), model(x))
        assert surge.counters["recompiles"] == min(k, 2), k   # the last one: a new tensor, alike


def _module_cases():
    plain = torch.nn.Linear(2, 2)
    forward = torch.nn.Linear(2, 2)
    forward.forward = lambda x: x
    backward = torch.nn.Linear(2, 2)
    backward.register_full_backward_hook(lambda *a: None)
    backward_pre = torch.nn.Linear(2, 2)
    backward_pre.register_full_backward_pre_hook(lambda *a: None)
    hooked = torch.nn.Linear(2, 2)
    hooked.register_forward_hook(lambda *a: None)
    pre_hooked = torch.nn.Linear(2, 2)
    pre_hooked.register_forward_pre_hook(lambda *a: None)
    sub = type("MyLinear", (torch.nn.Linear,), {})(2, 2)
    return [plain, forward, backward, backward_pre, hooked, pre_hooked, sub, torch.nn.ReLU()]


def test_module_checks_answer_as_the_python_ones(extension):
    python, native = native_checks.ModuleCalls(), native_checks.ModuleCalls()
    native.use(extension)
    assert native.module_alike is extension.module_alike
    for m in _module_cases():
        for cls in (torch.nn.Linear, type(m)):
            for forward_in_dict in (False, True):
                for backward_hooks in (False, True):
                    want = python.module_alike(m, cls, forward_in_dict, backward_hooks)
                    assert native.module_alike(m, cls, forward_in_dict, backward_hooks) is want, (m, cls)
        assert native.no_forward_hooks(m) is python.no_forward_hooks(m), m
    for thing in (object(), 3, torch.randn(2)):   # no hook tables: both raise (the entry misses)
        assert native.module_alike(thing, torch.nn.Linear, False, False) is False
        with pytest.raises(AttributeError):
            python.no_forward_hooks(thing)
        with pytest.raises(AttributeError):
            native.no_forward_hooks(thing)


def test_an_entry_recompiles_when_a_module_gets_hooks_or_a_forward(extension):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = surge.compile(model, backend="eager")
    compiled(torch.randn(2, 4))
    (source,) = [e.source for cache in list(surge.frontend.cache._ALL) for e in cache.entries]
    assert "surge_native.module_alike(" in source and "surge_native.no_forward_hooks(" in source
    calls = []
    changes = [lambda: model[1].register_forward_hook(lambda *a: calls.append("hook")),
               lambda: model[0].register_full_backward_hook(lambda *a: None),
               lambda: setattr(model[0], "forward", lambda x: 2 * x)]
    for k, change in enumerate(changes, start=1):
        change()
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x), model(x))
        assert surge.counters["recompiles"] >= k
    assert calls   # the hook ran in the compiled call
