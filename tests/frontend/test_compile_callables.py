"""``surge.compile`` accepts what torch.compile accepts (builtins, partials, classes,
callable objects), and probes of user objects never run their ``__getattr__``."""
from __future__ import annotations

import functools

import pytest
import torch

import surge
from frontend_helpers import Recorder, same


def scale(x, k, shift=0.0):
    return x * k + shift


class Affine:
    def __init__(self, w):
        self.w = w

    def __call__(self, x):
        return x * self.w + 1


class Holder:
    def __init__(self, x):
        self.y = x.sin() * 2


class RaisingGetattr:
    """A mapping-style config object: unknown attributes raise KeyError."""

    def __init__(self):
        self.__dict__["scale"] = 3.0

    def __getattr__(self, name):
        raise KeyError(name)

    def __call__(self, x):
        return x * self.scale


def compiled_with_recorder(target):
    rec = Recorder()
    return surge.compile(target, backend=rec, options={"raise_internal_errors": True}), rec


@pytest.mark.parametrize("target", [torch.sin, torch.nn.functional.relu, functools.partial(scale, k=3.0, shift=1.0),
                                    Affine(torch.randn(3)), RaisingGetattr()],
                         ids=["builtin", "torch-python-function", "partial", "callable-object", "raising-getattr"])
def test_any_callable_compiles_to_one_graph(target):
    compiled, rec = compiled_with_recorder(target)
    for _ in range(2):
        x = torch.randn(3)
        same(compiled(x), target(x))
    assert len(rec.graphs) == 1 and surge.counters["recompiles"] == 0
    assert surge.counters["fallbacks"] == 0 and surge.counters["graph_breaks"] == 0


def test_partial_arguments_are_guarded_inputs():
    compiled, rec = compiled_with_recorder(functools.partial(scale, k=2.0))
    x = torch.randn(3)
    same(compiled(x), scale(x, 2.0))
    same(compiled(x, shift=5.0), scale(x, 2.0, shift=5.0))
    other, _ = compiled_with_recorder(functools.partial(scale, k=4.0))
    same(other(x), scale(x, 4.0))


def test_a_class_compiles_its_construction():
    compiled, rec = compiled_with_recorder(Holder)
    x = torch.randn(3)
    made = compiled(x)
    assert type(made) is Holder
    same(made.y, Holder(x).y)
    assert len(rec.graphs) == 1 and surge.counters["fallbacks"] == 0


def test_builtin_wrappers_keep_separate_caches():
    sin, rec_sin = compiled_with_recorder(torch.sin)
    cos, rec_cos = compiled_with_recorder(torch.cos)
    x = torch.randn(3)
    same(sin(x), torch.sin(x))
    same(cos(x), torch.cos(x))
    assert surge.counters["recompiles"] == 0


def test_non_callable_is_a_clear_type_error():
    with pytest.raises(TypeError, match="expected a callable, got int"):
        surge.compile(3)


def test_object_whose_getattr_raises_key_error_as_an_argument():
    def apply(x, fn):
        return fn(x) + 1

    compiled, rec = compiled_with_recorder(apply)
    x = torch.randn(3)
    same(compiled(x, RaisingGetattr()), apply(x, RaisingGetattr()))
    assert surge.counters["fallbacks"] == 0


def test_graph_break_rebuilds_a_slice_of_a_graph_value():
    def sliced(x):
        s = slice(x.sum().long(), None)
        print("break")
        return s.start + 1

    compiled, rec = compiled_with_recorder(sliced)
    x = torch.randn(4)
    same(compiled(x), sliced(x))
    assert surge.counters["graph_breaks"] == 1 and surge.counters["fallbacks"] == 0
