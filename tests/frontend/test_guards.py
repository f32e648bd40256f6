"""Guards: every assumption of a graph is checked; changes recompile, others hit the cache."""
import dataclasses

import torch
import torch.nn as nn

import surge
from frontend_helpers import compile_strict, same

SCALE = 2.0
ACTIVATION = torch.relu


def scaled(x):
    return ACTIVATION(x) * SCALE


def test_global_number_and_function_changes_recompile(monkeypatch):
    compiled, rec = compile_strict(scaled)
    x = torch.randn(5)
    same(compiled(x), scaled(x))
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    same(compiled(x), scaled(x))
    monkeypatch.setitem(globals(), "ACTIVATION", torch.tanh)
    same(compiled(x), scaled(x))
    same(compiled(x), scaled(x))
    assert len(rec.graphs) == 3 and surge.counters["cache_hits"] == 1


def test_stride_dtype_requires_grad_and_subclass_are_guarded():
    def f(x):
        return x * 2

    compiled, rec = compile_strict(f)
    base = torch.randn(3, 3)
    variants = [base, base.t(), base.double(), base.clone().requires_grad_(), nn.Parameter(base.clone())]
    for v in variants:
        same(compiled(v), f(v))
    assert len(rec.graphs) == len(variants)
    for v in variants:
        compiled(v)
    assert surge.counters["cache_hits"] == len(variants)


def test_grad_mode_and_default_dtype_are_guarded():
    def f(x, w):
        return (x @ w).sum() + torch.ones(1)

    compiled, rec = compile_strict(f)
    x, w = torch.randn(2, 2), torch.randn(2, 2, requires_grad=True)
    assert compiled(x, w).requires_grad
    with torch.no_grad():
        assert not compiled(x, w).requires_grad
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out, expected = compiled(x, w), f(x, w)
    finally:
        torch.set_default_dtype(previous)
    assert out.dtype == expected.dtype == torch.float64
    assert len(rec.graphs) == 3


def test_closure_cell_change_recompiles():
    factor = 2

    def f(x):
        return x * factor

    compiled, rec = compile_strict(f)
    x = torch.randn(3)
    same(compiled(x), f(x))
    factor = 5
    same(compiled(x), f(x))
    assert len(rec.graphs) == 2 and factor == 5


def test_negative_zero_and_nan_constants():
    def f(x, c):
        return x * c

    compiled, rec = compile_strict(f)
    x = torch.randn(3)
    for c in (0.0, -0.0, float("nan"), float("nan"), 0.0):
        same(compiled(x, c), f(x, c)) if c == c else torch.testing.assert_close(compiled(x, c), f(x, c), equal_nan=True)
    assert len(rec.graphs) == 3


@dataclasses.dataclass
class Config:
    temperature: float = 1.0
    use_bias: bool = True


def test_object_attributes_read_are_guarded():
    cfg = Config()

    def f(x):
        y = x / cfg.temperature
        return y + 1 if cfg.use_bias else y

    compiled, rec = compile_strict(f)
    x = torch.randn(3)
    same(compiled(x), f(x))
    cfg.temperature = 0.5
    same(compiled(x), f(x))
    cfg.use_bias = False
    same(compiled(x), f(x))
    assert len(rec.graphs) == 3


def test_aliasing_decision_is_guarded():
    def f(a, b):
        return a * 2 if a is b else a + b

    compiled, rec = compile_strict(f)
    x, y = torch.randn(3), torch.randn(3)
    same(compiled(x, x), f(x, x))
    same(compiled(x, y), f(x, y))
    same(compiled(y, y), f(y, y))
    assert len(rec.graphs) == 2


def test_container_lengths_and_keys_are_guarded():
    def f(xs, d):
        return sum(xs) + sum(d[k] * len(k) for k in d)

    compiled, rec = compile_strict(f)
    t = torch.randn(2)
    same(compiled([t, t], {"a": t}), f([t, t], {"a": t}))
    same(compiled([t, t, t], {"a": t}), f([t, t, t], {"a": t}))
    same(compiled([t, t], {"bb": t}), f([t, t], {"bb": t}))
    same(compiled([t, t], {"a": t}), f([t, t], {"a": t}))
    assert len(rec.graphs) == 3


def test_module_training_flag_and_swapped_submodule():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    compiled, rec = compile_strict(model)
    x = torch.randn(2, 4)
    model.eval()
    same(compiled(x), model(x))
    model.train()
    torch.manual_seed(0)
    a = compiled(x)
    torch.manual_seed(0)
    same(a, model(x))
    model[0] = nn.Linear(4, 4)
    model.eval()
    same(compiled(x), model(x))  # a submodule alike the old one: its own weights, the eval entry
    assert len(rec.graphs) == 2
    model[0] = nn.Linear(4, 4, bias=False)
    same(compiled(x), model(x))
    assert len(rec.graphs) == 3


def test_hook_registered_after_first_call_is_seen():
    model = nn.Sequential(nn.Linear(3, 3))
    compiled, rec = compile_strict(model)
    x = torch.randn(2, 3)
    same(compiled(x), model(x))
    handle = model[0].register_forward_hook(lambda m, i, o: o * 10)
    same(compiled(x), model(x))
    handle.remove()
    same(compiled(x), model(x))
    assert len(rec.graphs) == 2


def test_a_global_shadowing_a_builtin_recompiles(monkeypatch):
    def count(xs):
        return len(xs) * xs[0]

    compiled, rec = compile_strict(count)
    xs = [torch.randn(2), torch.randn(2)]
    same(compiled(xs), count(xs))
    monkeypatch.setitem(globals(), "len", lambda seq: 10)
    same(compiled(xs), count(xs))
    monkeypatch.undo()  # this test module's own len() is shadowed until here
    assert len(rec.graphs) == 2


def test_leafness_of_an_input_is_guarded_when_read():
    def f(x):
        return x * 2 if x.is_leaf else x * 3

    compiled, rec = compile_strict(f)
    leaf = torch.randn(3, requires_grad=True)
    same(compiled(leaf), f(leaf))
    non_leaf = leaf * 1
    same(compiled(non_leaf), f(non_leaf))
    assert len(rec.graphs) == 2
