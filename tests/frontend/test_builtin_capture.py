"""Builtins and class/function introspection that real model code uses inside forward,
captured without a graph break: min/max, id(), __subclasses__(), __class__.__name__,
tensors as dict keys, typing annotations and casts, function renaming, super() in a
classmethod, numpy integer scalars."""
from __future__ import annotations

import functools
import typing
from typing import Optional

import numpy as np
import pytest

import torch
from torch import Tensor

import surge
from frontend_helpers import compile_strict, same
from graph_checks import check_one_graph


def scalars(i):
    return (torch.randn(1, requires_grad=True), torch.randn(1, requires_grad=True))


def builtin_min_max_of_tensors(a, b):
    return max(a, b), min(a, b, a * 2), max([a, b, b + 0.5])


def test_min_max_of_one_element_tensors_and_their_gradients():
    check_one_graph(builtin_min_max_of_tensors, scalars)
    compiled, _ = compile_strict(builtin_min_max_of_tensors)
    a, b = scalars(0)
    (ga, gb) = torch.autograd.grad(sum(o.sum() for o in compiled(a, b)), [a, b])
    (ea, eb) = torch.autograd.grad(sum(o.sum() for o in builtin_min_max_of_tensors(a, b)), [a, b])
    same(ga, ea)
    same(gb, eb)


def test_min_max_ties_keep_the_first_item_as_eager():
    def pick(a, b):
        return max(a, b) * 2

    compiled, _ = compile_strict(pick)
    a = torch.ones(1, requires_grad=True)
    b = torch.ones(1, requires_grad=True)
    grads = torch.autograd.grad(compiled(a, b), [a, b])
    assert grads[0].item() == 2.0 and grads[1].item() == 0.0


def test_max_of_many_element_tensors_raises_as_eager():
    def pick(a, b):
        return max(a, b)

    compiled, _ = compile_strict(pick)
    with pytest.raises(RuntimeError, match="ambiguous"):
        compiled(torch.randn(3), torch.randn(3))


def test_min_max_of_ints_and_sizes():
    def sized(x):
        return x * max(x.shape[0], 3) + min(2, x.shape[-1], 7)

    check_one_graph(sized, lambda i: (torch.randn(4, 5),))


class Cache:
    def __init__(self):
        self.store = {}


def test_id_of_inputs_is_a_guarded_constant():
    def by_id(x, p, cache):
        key = id(cache)
        seen = {id(p): 1.5}
        return x * seen[id(p)], key == id(cache)

    cache = Cache()
    p = torch.nn.Parameter(torch.randn(3))
    compiled, rec = compile_strict(by_id)
    for _ in range(2):
        x = torch.randn(3)
        same(compiled(x, p, cache), by_id(x, p, cache))
    assert len(rec.graphs) == 1 and surge.counters["graph_breaks"] == 0
    other = Cache()
    x = torch.randn(3)
    same(compiled(x, p, other), by_id(x, p, other))  # another object: another id, recompiled
    assert surge.counters["recompiles"] >= 1 and surge.counters["fallbacks"] == 0


class Base:
    pass


class Left(Base):
    pass


def count_subclasses(x):
    return x * len(Base.__subclasses__()), [c.__name__ for c in Base.__subclasses__()]


def test_subclasses_of_a_class_and_a_new_subclass_recompiles():
    check_one_graph(count_subclasses, lambda i: (torch.randn(2),))
    compiled, rec = compile_strict(count_subclasses)
    compiled(torch.randn(2))

    class Right(Base):
        pass

    x = torch.randn(2)
    same(compiled(x), count_subclasses(x))
    assert len(rec.graphs) == 2
    del Right


def test_class_name_of_tensors_and_objects():
    def names(x, p):
        return x * len(x.__class__.__name__), p.__class__.__name__, type(p).__qualname__

    check_one_graph(names, lambda i: (torch.randn(2), torch.nn.Parameter(torch.randn(2))))


def test_parameter_and_tensor_as_dict_keys():
    def keyed(x, p):
        scale = {p: 2.0, x: 3.0}
        y = x * 2
        made = {y: "y"}
        return x * scale[p] + p * scale[x], made[y], p in scale, y in scale

    check_one_graph(keyed, lambda i: (torch.randn(3), torch.nn.Parameter(torch.randn(3))))


def test_typing_annotations_and_cast_inside_a_function():
    def annotated(x, mask: Optional[Tensor] = None):
        out: Optional[Tensor] = None
        width: int = 2
        out = typing.cast(Tensor, x) * width
        if mask is not None:
            out = out * mask
        return out

    check_one_graph(annotated, lambda i: (torch.randn(3),))


def test_function_renamed_inside_the_trace():
    def renamed(x):
        def inner(a):
            return a + 1
        inner.__name__ = "step"
        inner.__qualname__ = "Model.step"
        return inner(x), inner.__name__, inner.__qualname__

    check_one_graph(renamed, lambda i: (torch.randn(3),))


def test_function_renamed_before_a_graph_break_keeps_its_name():
    def renamed_then_break(x):
        def inner(a):
            return a + 1
        inner.__name__ = "step"
        print("break")
        return inner(x), inner.__name__

    compiled, _ = compile_strict(renamed_then_break)
    x = torch.randn(3)
    same(compiled(x), renamed_then_break(x))
    assert surge.counters["graph_breaks"] == 1 and surge.counters["fallbacks"] == 0


def test_generator_names_follow_their_function_and_can_be_set():
    def names(x, split):
        def counting():
            yield x + 1
        counting.__name__ = "renamed"
        gen = counting()
        before = (gen.__name__, gen.__qualname__)
        gen.__qualname__ = "Model.gen"
        try:
            gen.__name__ = 3
        except TypeError as e:
            error = str(e)
        if split:
            print("break")  # the unstarted generator is made again, with its names
        return next(gen), before, gen.__name__, gen.__qualname__, error

    compiled, _ = compile_strict(names)
    for split in (False, True):
        x = torch.randn(3)
        same(compiled(x, split), names(x, split))
    assert surge.counters["fallbacks"] == 0


def test_wraps_on_functions_made_in_the_frame_keeps_every_attribute():
    def decorated(x):
        def scale(v: torch.Tensor) -> torch.Tensor:
            """Doubles."""
            return v * 2
        scale.tag = "kept"

        @functools.wraps(scale)
        def wrapper(v):
            return scale(v) + 1
        return (wrapper(x), wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ is scale, wrapper.tag,
                list(wrapper.__annotations__), wrapper.__module__, sorted(wrapper.__dict__))

    check_one_graph(decorated, lambda i: (torch.randn(3),))

    def kept_across_a_break(x):
        def scale(v):
            return v * 2

        wrapper = functools.update_wrapper(lambda v: scale(v) + 1, scale)
        wrapper.calls = 0
        print("break")
        wrapper.calls += 1
        return wrapper(x), wrapper.__name__, wrapper.__wrapped__(x), wrapper.calls, wrapper.calls

    compiled, _ = compile_strict(kept_across_a_break)
    for _ in range(2):
        x = torch.randn(3)
        same(compiled(x), kept_across_a_break(x))
    assert surge.counters["graph_breaks"] == 1 and surge.counters["fallbacks"] == 0


def test_singledispatch_registered_by_annotation_in_the_frame():
    def dispatched(x):
        @functools.singledispatch
        def describe(arg):
            return "object"

        @describe.register
        def _(arg: int):
            return "int"

        @describe.register
        def _(arg: torch.Tensor):
            return "tensor"
        return x + 1, describe(3), describe(x), describe("s")

    compiled, _ = compile_strict(dispatched)
    x = torch.randn(3)
    same(compiled(x), dispatched(x))
    assert surge.counters["fallbacks"] == 0


class Config:
    scale = 2

    @classmethod
    def factor(cls):
        return cls.scale


class Doubled(Config):
    @classmethod
    def factor(cls):
        return super().factor() * 2


def test_super_in_a_classmethod():
    def scaled(x):
        return x * Doubled.factor() + Config.factor()

    check_one_graph(scaled, lambda i: (torch.randn(3),))


def test_numpy_integer_arithmetic():
    def with_numpy(x, n):
        m = np.int64(3)
        return x * (n + m), int(n * 2), x.view(n, -1), n + 1

    check_one_graph(with_numpy, lambda i: (torch.randn(4), np.int64(2)))
    compiled, rec = compile_strict(with_numpy)
    x = torch.randn(4)
    same(compiled(x, np.int64(4)), with_numpy(x, np.int64(4)))
    same(compiled(x, np.int32(2)), with_numpy(x, np.int32(2)))  # another type: guarded
    assert len(rec.graphs) == 2


def test_parameterized_builtin_types_are_constants():
    """``list[Tensor]`` (torch.optim's ``cast(list[Tensor], xs)``) is a value of the trace:
    passed to ``typing.cast`` and returned."""
    def f(t):
        alias = dict[str, list[int]]
        return typing.cast(list[torch.Tensor], t) * 2, alias

    x = torch.randn(3)
    out, alias = surge.compile(f)(x)
    torch.testing.assert_close(out, x * 2)
    assert alias == dict[str, list[int]]
    assert surge.counters["fallbacks"] == 0 and surge.counters["graph_breaks"] == 0


class Point(typing.NamedTuple):
    x: int
    y: int


class Loud(str):
    def __iadd__(self, other):
        return "replaced"


LOUD = Loud("1")


class Anything:
    def __eq__(self, other):
        return True

    def f(self):
        pass


def test_bound_methods_compare_by_function_and_object_and_immutables_use_their_own_iadd():
    def compared(x):
        a, b, items = Anything(), Anything(), []
        s = LOUD
        s += "4"
        return (x + 1, a.f == a.f, a.f == b.f, a.f != a.f, items.append == items.append,
                items.append == [].append, items.append == items.pop, s, {Point(1, 2): "p"})

    check_one_graph(compared, lambda i: (torch.randn(3),))


def test_sorted_with_a_key_is_stable_also_reversed():
    def ranked(x):
        pairs = [(1, "a"), (0, "b"), (1, "c"), (0, "d")]
        return (x + 1, sorted(pairs, key=lambda p: p[0]), sorted(pairs, key=lambda p: p[0], reverse=True))

    check_one_graph(ranked, lambda i: (torch.randn(3),))
