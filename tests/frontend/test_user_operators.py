"""Python operators on objects of user classes are inlined as calls of their dunder
methods (no graph break), with CPython's order of forward and reflected methods."""
from __future__ import annotations

import pytest
import torch

import surge
from frontend_helpers import compile_strict, same
from graph_checks import check_one_graph


class Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        if isinstance(other, Vec):
            return Vec(self.t + other.t)
        if isinstance(other, (int, float)):
            return Vec(self.t + other)
        return NotImplemented

    def __radd__(self, other):
        return Vec(self.t + other * 10)

    def __mul__(self, other):
        return Vec(self.t * other)

    def __neg__(self):
        return Vec(-self.t)

    def __getitem__(self, index):
        return self.t[index]

    def __len__(self):
        return self.t.shape[0]

    def __contains__(self, name):
        return name == "t"

    def __eq__(self, other):
        return isinstance(other, Vec) and self.t.shape == other.t.shape

    def __lt__(self, other):
        return self.t.shape[0] < other.t.shape[0]


class SubVec(Vec):
    def __radd__(self, other):
        return Vec(self.t - 100)


class Empty:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


class Flag:
    def __init__(self, on):
        self.on = on

    def __bool__(self):
        return self.on


class Counter:
    def __init__(self):
        self.total = 0

    def __iadd__(self, n):
        self.total += n
        return self


def vec_args(i):
    return (torch.randn(3),)


def arithmetic(x):
    v = Vec(x)
    return (v + 1).t, (2 + v).t, (v * 3).t, (-v).t, (v + Vec(x)).t


def reflected_subclass_first(x):
    # SubVec overrides __radd__: Python asks the right operand first.
    return (Vec(x) + SubVec(x)).t


def container_protocol(x):
    v = Vec(x)
    return v[0] + v[-1], x * len(v), "t" in v, "u" in v


def comparisons(x):
    a, b, c = Vec(x), Vec(x), Vec(x[:1])
    return a == b, a != c, c < a, a > c, x + (a == b)


def truth_from_len_and_bool(x):
    out = x
    if Empty(0):
        out = out + 1
    if Empty(2):
        out = out + 2
    if not Flag(False):
        out = out * 3
    return out


def inplace_through_iadd(x):
    c = Counter()
    c += 2
    c += x.shape[0]
    return x * c.total


class Blocked(Counter):
    __iadd__ = None  # blocks `+=`, and with it the fallback to __add__


def blocked_iadd(x):
    c = Blocked()
    try:
        c += 2
    except TypeError as e:
        return x + 1, str(e)
    return x - 1, None


@pytest.mark.parametrize("program", [arithmetic, reflected_subclass_first, container_protocol, comparisons,
                                     truth_from_len_and_bool, inplace_through_iadd, blocked_iadd])
def test_operator_on_objects_made_in_the_trace(program):
    check_one_graph(program, vec_args)


def object_from_the_caller(x, v):
    return (v + 1.5).t * x, (1 + v).t, v[0], len(v), "t" in v, bool(v)


def test_operator_on_an_object_passed_in():
    check_one_graph(object_from_the_caller, lambda i: (torch.randn(3), Vec(torch.randn(3))))


@pytest.mark.parametrize("operand", [1, None], ids=["missing-method", "not-implemented"])
def test_unsupported_operand_raises_type_error_as_eager(operand):
    def bad(x, other):
        try:
            return Vec(x) - other if other is not None else Vec(x) + None
        except TypeError:
            return x * 0

    # Vec has no __sub__; its __add__ returns NotImplemented for None.
    check_one_graph(bad, lambda i: (torch.randn(2), operand))


def test_tuple_concatenation():
    def concat(x):
        a = (x, 1)
        b = (x * 2,) + a
        return b + (b[0] * b[2],), a * 2

    check_one_graph(concat, lambda i: (torch.randn(2),))


def test_len_of_user_object_guards_what_it_reads():
    def scaled(x, v):
        return x * len(v)

    compiled, rec = compile_strict(scaled)
    for n in (2, 2, 5):
        x = torch.randn(3)
        same(compiled(x, Empty(n)), scaled(x, Empty(n)))
    assert len(rec.graphs) == 2 and surge.counters["recompiles"] == 1 and surge.counters["graph_breaks"] == 0


class Same:
    def __eq__(self, other):
        return isinstance(other, Same)

    def __hash__(self):
        return 7


class Unhashable:
    __hash__ = None


def keys_by_value(x):
    merged = {Same(), Same()}
    try:
        {Unhashable(): 1}
    except TypeError as e:
        error = str(e)
    return x + len(merged), error


def test_objects_with_their_own_hash_are_keys_as_cpython_hashes_them():
    compiled, _ = compile_strict(keys_by_value)
    for _ in range(2):
        x = torch.randn(2)
        same(compiled(x), keys_by_value(x))
