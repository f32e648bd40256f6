"""Differences from eager that running CPython's test suite under surge found
(tests/pysuite), each reduced to a program: compiled, it returns (or raises) what
eager does, on a first and a second call."""
from __future__ import annotations

import collections
import copy
import dataclasses
import enum
import functools
import heapq
from collections import OrderedDict, UserDict, UserList, defaultdict, namedtuple

import pytest
import torch

import surge
from frontend_helpers import same


def check(fn, *args):
    """``fn(*args)`` compiled (backend eager) against eager, twice; the compiled results."""
    compiled = surge.compile(fn, backend="eager")
    outs = []
    for _ in range(2):
        expected = _outcome(fn, *args)
        actual = _outcome(compiled, *args)
        same(actual, expected)
        outs.append(actual)
    return outs


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:
        return type(e), str(e)


X = torch.ones(2)


def test_any_and_all_stop_at_the_item_that_decides():
    def walrus(x):
        found = any((last := n) == 1 for n in [1, 2, 3])
        everything = all((seen := n) < 2 for n in [1, 2, 3])
        return x + 1, found, last, everything, seen

    check(walrus, X)


class Logged:
    def __init__(self, log):
        self.log = log

    def __eq__(self, other):
        self.log.append(f"{type(self).__name__}.__eq__")
        return NotImplemented

    def __le__(self, other):
        self.log.append(f"{type(self).__name__}.__le__")
        return NotImplemented

    def __ge__(self, other):
        self.log.append(f"{type(self).__name__}.__ge__")
        return NotImplemented


class Base(Logged):
    __eq__ = Logged.__eq__  # (defined again: a class of its own with the same methods)


class Derived(Base):
    pass


def test_comparisons_try_a_subclass_first_and_each_method_once():
    def orders(x):
        logs = []
        for left, right in ((Logged, Logged), (Logged, Base), (Base, Derived), (Derived, Base)):
            log = []
            a, b = left(log), right(log)
            equal = a == b
            try:
                a <= b
            except TypeError:
                pass
            logs.append((equal, log))
        return x + 1, logs

    check(orders, X)


class EmptiesOther:
    def __init__(self, other):
        self.other = other

    def __eq__(self, _):
        self.other.clear()
        return NotImplemented


def test_list_equality_checks_the_lengths_again_after_the_items():
    def compares(x):
        first, second = [], []
        first.append(EmptiesOther(second))
        second.append(EmptiesOther(first))
        return x + 1, first == second, first, second

    check(compares, X)


def test_dict_union_keeps_the_class_and_in_place_operators_change_the_object():
    def unions(x):
        ints, strs = defaultdict(int, {1: 1, 2: 2}), defaultdict(str, {0: "zero", 1: "one"})
        made = [ints | strs, strs | ints, ints | dict(strs), dict(strs) | ints, OrderedDict(a=1) | {"b": 2}]
        alias, items = ints, {1, 2}
        same_set = items
        ints |= [(7, 7)]
        items |= {3}
        items -= {1}
        return (x + 1, [(type(d), getattr(d, "default_factory", None), list(d.items())) for d in made],
                alias is ints, dict(alias), same_set is items, sorted(same_set))

    check(unions, X)


def test_a_defaultdict_reached_twice_is_one_object_after_a_break():
    def aliases(x):
        table = defaultdict(list)
        other = table
        surge.graph_break()
        other["k"].append(1)
        return x + 1, table is other, dict(table)

    check(aliases, X)


class LooksUp(dict):
    @staticmethod
    def get(key, default=None):
        return "looked up"


class MatchArgs:
    __match_args__ = ("a", "a")
    a = 1


class NotATuple:
    __match_args__ = ["a"]
    a = 1


class NotStrings:
    __match_args__ = (None,)


class Both(UserDict, collections.abc.Sequence):
    pass


class Keys:
    KEY = "a"


def test_match_statements_follow_cpython():
    def matches(x, subject):
        out = []
        match subject:
            case [*_]:
                out.append("sequence")
            case {"a": found, **rest}:
                out.append(("mapping", found, rest))
            case {"foo": found}:
                out.append(("custom get", found))
            case _:
                out.append("neither")
        return x + 1, out

    for subject in (UserDict({"a": 1, "b": 2}), LooksUp({"foo": 1}), Both(), [1]):
        check(matches, X, subject)

    def duplicate_key(x):
        match {"a": 0}:
            case {Keys.KEY: first, "a": second}:  # the same key twice: CPython's ValueError
                return x, first, second
        return x + 1

    def class_pattern(x, cls):
        match cls():
            case MatchArgs(y, z) | NotATuple(y, z) | NotStrings(y, z):
                return x, y, z
        return x + 1

    check(duplicate_key, X)
    for cls in (MatchArgs, NotATuple, NotStrings):
        check(class_pattern, X, cls)


def test_exception_groups_check_their_arguments_as_cpython_does():
    def groups(x):
        out = []
        for make in (lambda: ExceptionGroup("eg"), lambda: ExceptionGroup(None, [ValueError(1)]),
                     lambda: ExceptionGroup("eg", [OSError]), lambda: ExceptionGroup("eg", [KeyboardInterrupt()]),
                     lambda: BaseExceptionGroup("beg", [ValueError(1), TypeError(2)])):
            try:
                out.append(type(make()))
            except (TypeError, ValueError) as e:
                out.append((type(e), str(e)))
        return x + 1, out

    check(groups, X)


class ClearsOnLess(int):
    """An int subclass with a method of its own: an object, not a constant folded by
    running its method once at capture."""

    target: list = []

    def __lt__(self, other):
        ClearsOnLess.target.clear()
        return NotImplemented


def test_an_int_subclass_with_its_own_methods_runs_them_in_the_trace():
    def pushes(x):
        heap = []
        ClearsOnLess.target = heap
        heapq.heappush(heap, 0)
        try:
            heapq.heappush(heap, ClearsOnLess(1))
        except IndexError:
            return x + 1, "IndexError", heap
        return x, "no error", heap

    check(pushes, X)


class Items(list):
    pass


def test_deepcopy_of_a_list_subclass():
    def copies(x):
        items = Items([[1, 2], 3])
        items.extra = [4]
        made = copy.deepcopy(items)
        return x + 1, type(made), list(made), made.extra, made[0] is items[0]

    check(copies, X)


@dataclasses.dataclass
class Payload:
    a: int


class Entries(Payload, enum.Enum):
    FIRST = 1


def test_enums_made_in_the_frame_and_an_enum_members_dataclass_value():
    def enums(x):
        Month = enum.Enum("Month", "june july", type=int)
        return x + 1, Month(1) == 1, Month(2).name, Entries.FIRST.value == Payload(1)

    check(enums, X)


def test_a_missing_global_in_a_handler_is_chained_to_the_handled_exception():
    def handler(x):
        try:
            try:
                1 / 0
            except ZeroDivisionError:
                undefined_name  # noqa: F821 (the point of the test)
        except NameError as e:
            return x + 1, type(e.__context__), e.name

    check(handler, X)


class Point(namedtuple("_Point", ["x", "y"])):
    pass


def test_a_namedtuple_subclass_keeps_its_attributes_across_a_break():
    def attributes(x):
        p = Point(3, 4)
        p.w = 5
        return x + 1, p.__dict__, p.w

    check(attributes, X)


def test_iterators_across_a_break_see_later_changes():
    def iterators(x):
        items = [1, 2, 3]
        done, behind = iter(items), iter(items)
        for _ in done:
            next(behind)
        surge.graph_break()
        items.append(9)
        table = {1: 1}
        try:
            for key in table:
                surge.graph_break()
                table[key + 1] = 1
        except RuntimeError as e:
            error = str(e)
        wrapped = UserList([1, 2])
        first, second = iter(wrapped), iter(wrapped)
        for _ in first:
            next(second)
        wrapped.append(3)
        return x + 1, list(done), list(behind), error, list(first), list(second)

    check(iterators, X)


@pytest.mark.parametrize("literal", [True, False])
def test_set_remove_raises_and_discard_does_not(literal):
    def removes(x):
        s = {1, 2}
        s.discard(5)
        try:
            s.remove(5 if literal else 1)
        except KeyError as e:
            return x + 1, e.args, s
        return x, (), s

    check(removes, X)


class GenLike:
    def send(self, value):
        pass

    def throw(self, *args):
        pass

    def close(self):
        pass

    def __iter__(self):
        return self

    def __next__(self):
        pass


class ClaimsAnotherClass:
    """Answers ``__class__`` for itself, as a mock with a spec does."""

    @property
    def __class__(self):
        return GenLike


class ShadowsClass:
    __class__ = 413


def test_class_checks_ask_an_objects_own_dunder_class():
    def checks(x, claims):
        made = ShadowsClass()
        return (x + 1, isinstance(claims, collections.abc.Generator), isinstance(claims, GenLike),
                claims.__class__ is GenLike, made.__class__, ShadowsClass().__class__)

    check(checks, X, ClaimsAnotherClass())


def test_types_coroutine_marks_a_generator_function_made_in_the_frame():
    import types

    def marks(x):
        @types.coroutine
        def coro():
            yield

        made = coro()
        return (x + 1, type(made).__name__, isinstance(made, collections.abc.Coroutine),
                bool(coro.__code__.co_flags & 0x100), (1).__class__ is int)

    check(marks, X)


class Tagged(int):
    pass


def test_an_int_subclass_with_instance_attributes_is_not_a_constant():
    def reads(x, n):
        return x + 1, n.tag, n + 1

    compiled = surge.compile(reads, backend="eager")
    for tag in ("a", "b"):
        n = Tagged(5)
        n.tag = tag  # the same value, another attribute: a value guard alone would pass it
        same(compiled(X, n), reads(X, n))


class Pair:
    def __init__(self, a):
        self.a = a

    def __eq__(self, other):
        return isinstance(other, Pair) and self.a == other.a

    def __hash__(self):
        return hash(self.a)


def test_a_dict_whose_key_changed_hash_is_not_rebuilt_by_cpython():
    def keeps(x):
        key = Pair(1)
        d = {key: 1, Pair(2): 2}
        key.a = 3  # its stored hash is hash(1) now (CPython never hashes it again)
        surge.graph_break()
        return x + 1, len(d), Pair(1) in d, Pair(3) in d, [k.a for k in d]

    check(keeps, X)


@functools.lru_cache(maxsize=2)
def _tripled(n):
    return n * 3


def test_lru_cache_calls_leave_the_cache_as_eager_does():
    def cached(x, k):
        total = _tripled(2) + _tripled(k) + _tripled(2)
        return x * total, _tripled.cache_info()

    compiled = surge.compile(cached, backend="eager")
    for k in (5, 5, 7):
        _tripled.cache_clear()
        expected = cached(X, k)
        _tripled.cache_clear()
        same(compiled(X, k), expected)


class HashCounted:
    calls = 0

    def __hash__(self):
        HashCounted.calls += 1
        return 1


def test_lru_cache_of_an_object_hashes_it_once_per_call():
    @functools.lru_cache(maxsize=None)
    def ident(obj):
        return 1

    def calls(x, obj):
        return x + ident(obj) + ident(obj)

    compiled = surge.compile(calls, backend="eager")
    obj = HashCounted()
    for run in (calls, compiled):
        HashCounted.calls = 0
        ident.cache_clear()
        run(X, obj)
        assert HashCounted.calls == 2


def test_a_builtin_the_program_replaced_is_traced_and_surge_keeps_its_own():
    import builtins

    def patched(x):
        old = builtins.len
        try:
            builtins.len = functools.lru_cache(4)(len)
            sizes = [len("abcdef"[:i]) for i in (0, 1, 2, 2)]
        finally:
            builtins.len = old
        return x + 1, sizes

    check(patched, X)
    assert builtins.len is len


def test_a_chain_alive_at_a_break_is_a_chain():
    import itertools

    def chains(x):
        it = itertools.chain([1, 2], [3])
        next(it)
        surge.graph_break()
        try:
            itertools.chain().__setstate__(())
        except TypeError as e:
            error = type(e)
        return x + 1, type(it).__name__, list(it), error

    check(chains, X)


def test_sets_iterate_and_pop_in_cpythons_order():
    def sets(x, n):
        s = {3, 1, 2, n, "b", "a", 10, 9}
        s.discard(9)
        s.add(-5)
        popped = [s.pop(), s.pop()]
        return (x + 1, list(s), popped, list({5, 3} | {1, n}), list(s & {1, 10, -5}), list(s - {1}),
                list(s ^ {7, 10}), list(s.union([11, 0])), repr(s))

    check(sets, X, 100)


def test_a_set_iterator_alive_at_a_break_notices_the_set_grow():
    def grows(x):
        s = {1, 2, 3}
        try:
            for i in s:
                surge.graph_break()
                s.add(i + 10)
        except RuntimeError as e:
            return x + 1, str(e), sorted(s)
        return x, "no error", sorted(s)

    check(grows, X)


class NeLeft:
    def __init__(self, log):
        self.log = log

    def __eq__(self, other):
        self.log.append("Left.__eq__")
        return NotImplemented


class NeRight(NeLeft):
    def __eq__(self, other):
        self.log.append("Right.__eq__")
        return NotImplemented

    def __ne__(self, other):
        self.log.append("Right.__ne__")
        return NotImplemented


class NeOther:
    def __init__(self, log):
        self.log = log

    def __ne__(self, other):
        self.log.append("Other.__ne__")
        return NotImplemented


def test_not_equal_tries_object_ne_as_cpython_does():
    def compares(x):
        logs = []
        for left, right in ((NeLeft, NeOther), (NeLeft, NeRight), (NeRight, NeLeft)):
            log = []
            logs.append((left(log) != right(log), log))
        return x + 1, logs, type(reversed(range(1))) is type(iter(range(1)))

    check(compares, X)
