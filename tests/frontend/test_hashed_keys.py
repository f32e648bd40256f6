"""Objects whose class defines ``__hash__`` / ``__eq__`` in Python are dict keys and set
elements as CPython hashes them: captured (their traced hash, under the guards the trace
installed, and their traced ``==`` on equal hashes), with the calls of ``__hash__`` and
``__eq__`` CPython makes, across graph breaks and as inputs; identity-keyed inputs guard
which of them are one object."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import surge
from frontend_helpers import compile_strict, same

CALLS: list = []


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self):
        return hash((self.x, self.y))

    def __repr__(self):
        return f"Point({self.x}, {self.y})"


class Counted(Point):
    """Counts its calls: CPython calls it, not the trace (which would hash a dict's keys
    again where CPython does not)."""

    def __eq__(self, other):
        CALLS.append(("eq", self.x, self.y))
        return super().__eq__(other)

    def __hash__(self):
        CALLS.append(("hash", self.x, self.y))
        return super().__hash__()


@dataclasses.dataclass(frozen=True)
class Frozen:
    name: str
    n: int


def _counted(fn, *args):
    CALLS.clear()
    out = fn(*args)
    return out, list(CALLS)


def _keys_in_frame(x, kind=Point):
    d = {kind(1, 2): x, kind(3, 4): x * 2}
    d[kind(1, 2)] = x + 3                 # an equal key: the entry is replaced, not added
    s = {kind(1, 2), kind(1, 2), kind(5, 6)}
    s.discard(kind(5, 6))
    frozen = {Frozen("a", 1): 1, Frozen("a", 1): 2, Frozen("b", 1): 3}
    return (d[kind(3, 4)] + len(d) + len(s), kind(1, 2) in d, d.get(kind(9, 9)), d.pop(kind(1, 2)),
            sorted(frozen.values()), hash(kind(5, 6)) == hash((5, 6)), list(s))


def test_keys_made_in_the_frame_are_one_graph():
    compiled, rec = compile_strict(_keys_in_frame)
    for _ in range(2):
        x = torch.randn(3)
        same(compiled(x), _keys_in_frame(x))
    assert len(rec.graphs) == 1 and surge.counters["graph_breaks"] == 0 and surge.counters["fallbacks"] == 0


def test_a_hash_or_eq_that_writes_state_is_called_as_often_as_in_cpython():
    compiled = surge.compile(_keys_in_frame, backend="eager")
    for _ in range(2):
        x = torch.randn(3)
        same(_counted(compiled, x, Counted), _counted(_keys_in_frame, x, Counted))


def _lookup(x, table, key):
    return table[key] * x, key in table, {key: 1, Point(0, 0): 2}[Point(key.x, key.y)]


def test_input_keys_are_hashed_in_the_trace_and_guarded_on_what_it_read():
    compiled, rec = compile_strict(_lookup)
    x = torch.randn(2)
    table = {Point(1, 1): 2.0, Point(2, 2): 3.0}
    for key in (Point(1, 1), Point(2, 2), Point(1, 1)):
        same(compiled(x, table, key), _lookup(x, table, key))
    assert len(rec.graphs) == 2 and surge.counters["recompiles"] == 1 and surge.counters["cache_hits"] == 1
    table = {Point(1, 1): 2.0, Point(2, 2): 3.0}  # other objects, equal keys: the same guards hold
    same(compiled(x, table, Point(1, 1)), _lookup(x, table, Point(1, 1)))
    assert len(rec.graphs) == 2 and surge.counters["cache_hits"] == 2


def _break_with_keyed_containers(x, log):
    d = {Point(1, 2): x, Point(3, 4): x * 2}
    s = {Point(1, 2), Point(5, 6)}
    surge.graph_break()
    log[Point(7, 8)] = d[Point(3, 4)]
    return d[Point(1, 2)] + 1, Point(5, 6) in s, len(s | {Point(1, 2)})


def test_keyed_containers_across_a_graph_break():
    compiled, _ = compile_strict(_break_with_keyed_containers)
    for _ in range(2):
        x = torch.randn(3)
        log, expected_log = {Point(0, 0): 1}, {Point(0, 0): 1}
        same(compiled(x, log), _break_with_keyed_containers(x, expected_log))
        assert list(log) == [Point(0, 0), Point(7, 8)]
        same(log[Point(7, 8)], expected_log[Point(7, 8)])
    assert surge.counters["graph_breaks"] == 1 and surge.counters["fallbacks"] == 0
    assert surge.counters["cache_hits"] == 2  # the resume function's entry takes the rebuilt dict


class Plain:
    pass


def _identity(x, a, b):
    return x + 1 if a is b else x - 1, x * {a: 1}.get(b, 5)


def test_which_identity_keyed_inputs_are_one_object_is_guarded():
    compiled, _ = compile_strict(_identity)
    x = torch.ones(1)
    o = Plain()
    for a, b in ((o, o), (o, Plain()), (o, o)):
        same(compiled(x, a, b), _identity(x, a, b))


class BigHash:
    def __hash__(self):
        return 2 ** 70 + 12345


class BadHash:
    def __hash__(self):
        return "not an int"


class TensorEq:
    def __init__(self, t):
        self.t = t

    def __eq__(self, other):
        return bool((self.t == other.t).all())

    def __hash__(self):
        return 1


def _odd_hashes(x):
    try:
        {BadHash(): 1}
    except TypeError as e:
        error = str(e)
    return x + 1, hash(BigHash()), {BigHash(): 1}.get(BigHash()), error


def test_hash_results_are_converted_as_cpython_converts_them():
    compiled, rec = compile_strict(_odd_hashes)
    x = torch.randn(2)
    same(compiled(x), _odd_hashes(x))
    assert len(rec.graphs) == 1


def test_an_eq_that_reads_tensor_data_breaks_and_still_matches():
    def keyed(x):
        d = {TensorEq(x): 1}
        return d.get(TensorEq(x + 0), 0), x.sum()

    compiled = surge.compile(keyed, backend="eager")
    x = torch.randn(3)
    same(compiled(x), keyed(x))
    assert surge.counters["graph_breaks"] + surge.counters["fallbacks"] >= 1


def test_set_remove_of_a_missing_element_raises_key_error():
    def removes(x):
        s = {Point(1, 1)}
        try:
            s.remove(Point(2, 2))
        except KeyError as e:
            return x + 1, e.args
        return x, ()

    compiled, rec = compile_strict(removes)
    x = torch.randn(2)
    same(compiled(x), removes(x))
    assert len(rec.graphs) == 1


@pytest.mark.parametrize("attr", ["x", "y"])
def test_a_key_changed_by_the_caller_recompiles(attr):
    def reads(x, table):
        return x * table.get(Point(1, 1), 0.5)

    compiled, rec = compile_strict(reads)
    x = torch.randn(2)
    key = Point(1, 1)
    table = {key: 3.0}
    same(compiled(x, table), reads(x, table))
    setattr(key, attr, 7)  # the table's key no longer equals Point(1, 1)
    same(compiled(x, table), reads(x, table))
    assert len(rec.graphs) == 2
