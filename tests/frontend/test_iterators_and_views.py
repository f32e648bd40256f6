"""Iterators advance as CPython's, dict views are live, and ``is`` answers as eager
where Python fixes the answer (and breaks where it does not), compared with eager on
fresh inputs; each is captured whole (fullgraph=True, one graph)."""
import copy
import itertools
import types

import pytest
import torch

import surge
from frontend_helpers import compile_strict, same


def one_graph(fn, *args):
    compiled, rec = compile_strict(fn, fullgraph=True)
    for _ in range(2):
        x = torch.randn(3)
        same(compiled(x, *args), fn(x, *args))
    assert len(rec.graphs) == 1


# ---- iterators ---------------------------------------------------------------

def advanced_then_listed(x):
    it = iter([1, 2, 3, 4])
    next(it)
    return x + 1, list(it), list(it)


def one_iterator_two_consumers(x):
    it = iter([1, 2, 3, 4, 5])
    pairs = list(zip(it, it))
    numbers = iter(range(6))
    first = [v for _, v in zip(range(2), numbers)]
    return x + 1, pairs, first, list(numbers)


def list_iterator_sees_appends(x):
    items = [1, 2]
    out = []
    for v in items:
        if len(items) < 4:
            items.append(v * 10)
        out.append(v)
    it = iter(items)
    list(it)
    items.append(99)  # an exhausted iterator stays exhausted
    return x + 1, out, list(it)


def map_and_enumerate_are_lazy(x):
    log = []

    def record(v):
        log.append(v)
        return v

    mapped = map(record, [1, 2, 3])
    log.append("made")
    next(mapped)
    log.append("one")
    rest = list(mapped)

    def counting():
        for i in range(3):
            log.append(("gen", i))
            yield i
    numbered = enumerate(counting(), start=5)
    log.append("made 2")
    first = next(numbered)
    return x + 1, log, rest, first


def zip_pulls_in_order(x):
    log = []

    def g(n):
        for i in range(n):
            log.append((n, i))
            yield i
    return x + 1, list(zip(g(2), g(3))), log


def reversed_reads_the_list_live(x):
    items = [1, 2, 3]
    backwards = reversed(items)
    items[0] = 9
    return x + 1, list(backwards), list(filter(None, [0, 1, 0, 2])), list(itertools.chain([1], (2, 3)))


def dict_iteration_raises_on_size_change(x):
    d = {"a": 1, "b": 2}
    try:
        for k in d:
            d[k + "!"] = 0
    except RuntimeError as e:
        message = str(e)
    s = {1, 2}
    try:
        for v in s:
            s.add(v + 10)
    except RuntimeError as e:
        message2 = str(e)
    return x + 1, message, message2


def zip_strict_messages(x):
    out = []
    for a, b, c in (([1, 2], [1], [1, 2]), ([1], [1, 2], [1]), ([1, 2], [1, 2], [1])):
        try:
            list(zip(a, b, c, strict=True))
        except ValueError as e:
            out.append(str(e))
    return x + 1, out


@pytest.mark.parametrize("fn", [advanced_then_listed, one_iterator_two_consumers, list_iterator_sees_appends,
                                map_and_enumerate_are_lazy, zip_pulls_in_order, reversed_reads_the_list_live,
                                dict_iteration_raises_on_size_change, zip_strict_messages])
def test_iterators_advance_as_eager(fn):
    one_graph(fn)


def test_iterator_shared_across_a_break_is_one_object(capsys):
    def f(x):
        it = iter([1, 2, 3, 4])
        alias = it
        next(it)
        print("break")
        return x + next(alias), list(it)

    compiled = surge.compile(f, backend="eager")
    x = torch.randn(2)
    same(compiled(x), f(x))


def test_map_alive_at_a_break_is_left_to_cpython(capsys):
    log = []

    def f(x):
        log.clear()
        mapped = map(log.append, [1, 2])
        print("break")
        return x + 1, list(mapped), list(log)

    compiled = surge.compile(f, backend="eager")
    x = torch.randn(2)
    same(compiled(x), f(x))


# ---- dict views ----------------------------------------------------------------

def views_are_live(x):
    d = {"a": 1}
    keys, values, items = d.keys(), d.values(), d.items()
    d["new"] = 2
    return x + 1, len(keys), list(keys), list(values), list(items), repr(keys), type(keys).__name__


def views_are_set_like(x):
    d = {"a": 1, "b": 2}
    keys = d.keys()
    return (x + 1, sorted(keys & {"a", "c"}), sorted(keys | {"z"}), sorted(keys - {"a"}), sorted(keys ^ ["a", "q"]),
            sorted({"b", "y"} - keys), keys == {"a", "b"}, keys == ["a", "b"], d.items() == {("a", 1), ("b", 2)},
            sorted(d.items() & {("a", 1)}), keys.isdisjoint(["q"]), d.values() == d.values())


def membership_in_views(x):
    d = {"a": 1, "b": 2}
    return (x + 1, ("a", 1) in d.items(), ("a", 2) in d.items(), "a" in d.keys(), 2 in d.values(),
            3 in d.values(), ("a", 1, 2) in d.items())


@pytest.mark.parametrize("fn", [views_are_live, views_are_set_like, membership_in_views])
def test_dict_views_as_eager(fn):
    one_graph(fn)


def test_a_view_returned_is_a_view_of_the_returned_dict():
    def f(x, d):
        d2 = dict(d)
        d2["z"] = x + 1
        return d2, d2.keys()

    compiled, _ = compile_strict(f, fullgraph=True)
    d, keys = compiled(torch.randn(2), {"a": 1})
    assert type(keys) is type({}.keys()) and list(keys) == ["a", "z"]


# ---- identity --------------------------------------------------------------------

def identity_python_fixes(x, n):
    pair = (n, 2)
    small = 5
    frozen = frozenset([n, 3])
    return (x + 1, pair * 1 is pair, pair + () is pair, () + pair is pair, pair * 2 is pair, small is 5,
            None is None, () is (), frozenset(frozen) is frozen, set(frozen) is frozen,
            copy.deepcopy(frozen) is frozen, copy.deepcopy(frozen) == frozen, (n, 2) is pair)


def test_identity_where_python_fixes_it():
    one_graph(identity_python_fixes, 1)


def test_identity_of_equal_values_python_does_not_fix_breaks():
    def f(x, s):
        big = int(s)
        return x + 1, big is 1000

    compiled = surge.compile(f, backend="eager")
    x = torch.randn(2)
    same(compiled(x, "1000"), f(x, "1000"))
    with pytest.raises(surge.errors.Unsupported):
        compile_strict(f, fullgraph=True)[0](x, "1000")


def _iterate_while_replacing(x, part, grows):
    """A loop over a dict that deletes an entry and inserts one (the size unchanged):
    CPython's iterator reaches the new entry, and raises once it reaches more entries
    than the dict had when iteration began."""
    d = {0: 0, 1: 1} if grows else {0: 0}
    seen = []
    try:
        for item in getattr(d, part)():
            seen.append(item)
            key = max(d)
            del d[key]
            d[key + 10 if grows else key] = key
    except RuntimeError as e:
        return x + 1, seen, str(e), d
    return x - 1, seen, None, d


@pytest.mark.parametrize("part", ["keys", "values", "items"])
@pytest.mark.parametrize("grows", [False, True])
def test_dict_mutated_during_iteration_without_changing_size(part, grows):
    one_graph(_iterate_while_replacing, part, grows)


class Registry(dict):
    pass


def _proxies(x, cls, split):
    d = cls()
    by_view, made = d.keys().mapping, types.MappingProxyType(d)
    before = (by_view == d, len(made))
    d["w"] = x * 2
    if split:
        print("break")  # the proxies are rebuilt over the very dict
    d["v"] = 1
    return (x + 1, before, by_view == d, made == d, isinstance(made, types.MappingProxyType), len(by_view),
            "w" in made, made["v"], list(by_view), by_view, made, d)


@pytest.mark.parametrize("cls", [dict, Registry])
@pytest.mark.parametrize("split", [False, True])
def test_mapping_proxies_are_live_views_of_their_dict(cls, split):
    compiled, _ = compile_strict(_proxies)
    for _ in range(2):
        x = torch.randn(3)
        out, expected = compiled(x, cls, split), _proxies(x, cls, split)
        same(out[:-3], expected[:-3])
        for proxy in out[-3:-1]:
            assert type(proxy) is types.MappingProxyType and proxy == out[-1] and list(proxy) == ["w", "v"]
        out[-1]["late"] = 0  # a write to the dict is seen through both proxies
        assert all("late" in proxy for proxy in out[-3:-1])
    assert surge.counters["fallbacks"] == 0


def _iterator_types(x):
    return x + 1, [type(iter(v)).__name__ for v in ("abc", "🚀", b"ab", (1, 2), range(3), [1])]


def test_iterators_of_constants_have_cpythons_types():
    one_graph(_iterator_types)


def test_equal_strings_and_numbers_keep_their_identities_across_a_break():
    def f(x, tail):
        a = b = "xyzpdq"
        c = a[:3] + tail
        big, other = 10 ** 6, int("1000000")
        print("break")  # a, b, c, big and other are handed to CPython here
        return x + 1, a is b, a is c, a == c, id(a) == id(b), big is other, big == other

    compiled = surge.compile(f, backend="eager")
    for _ in range(2):
        x = torch.randn(2)
        same(compiled(x, "pdq"), f(x, "pdq"))
