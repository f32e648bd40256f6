"""Rules for methods of symbolic lists, tuples, dicts and sets, one per (type, name)."""
from __future__ import annotations

from .base import raise_in_user_code, unsupported
from .constant import NONE, ConstantVariable
from .dict_views import DictViewVariable
from .containers import (
    _ABSENT, DictVariable, ListVariable, SetEntries, SetVariable, TupleVariable, _key_of, key_variable,
    set_operation,
)

RULES: dict = {}


def rule(kind, *names):
    def register(fn):
        for n in names:
            RULES[(kind, n)] = fn
        return fn
    return register


# Methods that change their container (counted in ``Tracer.writes``).
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "popitem", "setdefault",
    "add", "discard", "difference_update", "intersection_update", "symmetric_difference_update",
    "__setitem__", "__delitem__", "__iadd__", "__imul__", "__ior__", "__iand__", "__isub__", "__ixor__",
})


def call_container_method(tx, container, name, args, kwargs):
    if name in MUTATING_METHODS:
        tx.writes += 1
    for kind in type(container).__mro__:
        fn = RULES.get((kind, name))
        if fn is not None:
            return fn(tx, container, *args, **kwargs)
    unsupported(f"{container.python_type().__name__}.{name}() is not supported in compiled code")


# ---- list --------------------------------------------------------------------


@rule(ListVariable, "append")
def _append(tx, lst, value):
    lst.check_mutable(tx)
    if not lst.append_unread([value]):
        lst.items.append(value)
    return NONE


@rule(ListVariable, "extend")
def _extend(tx, lst, values):
    lst.check_mutable(tx)
    new = values.iterate(tx) if values is not lst else list(lst.items)
    if not lst.append_unread(new):
        lst.items.extend(new)
    return NONE


@rule(ListVariable, "insert")
def _insert(tx, lst, index, value):
    lst.check_mutable(tx)
    lst.items.insert(index.as_constant(), value)
    return NONE


@rule(ListVariable, "pop")
def _list_pop(tx, lst, index=None):
    lst.check_mutable(tx)
    if not lst.items:
        unsupported("pop from an empty list")
    return lst.items.pop(-1 if index is None else index.as_constant())


@rule(ListVariable, "remove")
def _remove(tx, lst, value):
    lst.check_mutable(tx)
    i = lst.index_of(tx, value)
    if i is None:
        unsupported("list.remove(x): x not in list")
    del lst.items[i]
    return NONE


@rule(ListVariable, "clear")
def _clear(tx, lst):
    lst.check_mutable(tx)
    lst.items.clear()
    return NONE


@rule(ListVariable, "reverse")
def _reverse(tx, lst):
    lst.check_mutable(tx)
    lst.items.reverse()
    return NONE


@rule(ListVariable, "sort")
def _sort(tx, lst, key=None, reverse=None):
    lst.check_mutable(tx)
    if key is not None:
        unsupported("list.sort(key=...) in compiled code")
    values = sorted((i.as_constant() for i in lst.items), reverse=bool(reverse and reverse.as_constant()))
    lst.items[:] = [ConstantVariable(v) for v in values]
    return NONE


@rule(ListVariable, "copy")
def _list_copy(tx, lst):
    return ListVariable(lst.items)


@rule(ListVariable, "index")
@rule(TupleVariable, "index")
def _index(tx, seq, value):
    i = seq.index_of(tx, value)
    if i is None:
        unsupported("sequence.index(x): x not in sequence")
    return ConstantVariable(i)


@rule(ListVariable, "count")
@rule(TupleVariable, "count")
def _count(tx, seq, value):
    from ..interpreter.operators import compare_equal

    return ConstantVariable(sum(1 for item in seq.items if compare_equal(tx, item, value)))


@rule(ListVariable, "__getitem__")
@rule(TupleVariable, "__getitem__")
@rule(DictVariable, "__getitem__")
def _getitem(tx, container, key):
    return container.getitem(tx, key)


# ---- dict --------------------------------------------------------------------


@rule(DictVariable, "get")
def _get(tx, d, key, default=NONE):
    k = _key_of(tx, key)
    return d.items.get(k, default)


def _view(part: str):
    def make(tx, d):
        return DictViewVariable(d, part)
    return make


for _part in ("keys", "values", "items"):
    rule(DictVariable, _part)(_view(_part))


@rule(DictVariable, "update")
def _update(tx, d, other=None, **kwargs):
    d.check_mutable(tx)
    if other is not None:
        if isinstance(other, DictVariable):
            d.items.update(other.items)
        else:
            for pair in other.iterate(tx):
                k, v = pair.iterate(tx)
                d.items[_key_of(tx, k)] = v
    for k, v in kwargs.items():
        d.items[k] = v
    return NONE


@rule(DictVariable, "pop")
def _dict_pop(tx, d, key, default=None):
    d.check_mutable(tx)
    k = _key_of(tx, key)
    found = d.items.pop(k, _ABSENT)
    if found is not _ABSENT:
        return found
    if default is None:
        raise_in_user_code(KeyError, repr(k), args=(k,))
    return default


@rule(DictVariable, "setdefault")
def _setdefault(tx, d, key, default=NONE):
    d.check_mutable(tx)
    return d.items.setdefault(_key_of(tx, key), default)


@rule(DictVariable, "copy")
def _dict_copy(tx, d):
    copied = DictVariable(d.items, cls=d.cls)
    copied.default_factory = d.default_factory  # a defaultdict's copy keeps its factory
    return copied


@rule(DictVariable, "__contains__")
def _dict_contains(tx, d, key):
    return ConstantVariable(_key_of(tx, key) in d.items)


@rule(DictVariable, "clear")
def _dict_clear(tx, d):
    d.check_mutable(tx)
    d.items.clear()
    return NONE


# ---- set ---------------------------------------------------------------------


@rule(SetVariable, "add")
def _set_add(tx, s, value):
    s.add(tx, value)
    return NONE


@rule(SetVariable, "update")
def _set_update(tx, s, *others):
    for other in others:
        for v in other.iterate(tx):
            s.add(tx, v)
    return NONE


def _set_removal(missing_raises: bool):
    def remove(tx, s, value):
        if s.source is not None or s.frozen:
            unsupported("mutating a set that came from the function's inputs")
        k = _key_of(tx, value)
        if s.items.pop(k, _ABSENT) is _ABSENT and missing_raises:  # remove() of a missing element
            raise_in_user_code(KeyError, repr(k), args=(k,))
        return NONE
    return remove


@rule(SetVariable, "pop")
def _set_pop(tx, s):
    if s.source is not None or s.frozen:
        unsupported("mutating a set that came from the function's inputs")
    if not s.items:
        raise_in_user_code(KeyError, "pop from an empty set")
    return s.items.popitem()[1]  # the element CPython's table gives first (SetEntries)


rule(SetVariable, "discard")(_set_removal(False))
rule(SetVariable, "remove")(_set_removal(True))


def _set_items(tx, other):
    return {_key_of(tx, v): v for v in other.iterate(tx)}


def _set_method(name: str):
    def rule(tx, s, *others):
        return set_operation(tx, s, name, list(others))
    return rule


for _name in ("union", "intersection", "difference", "symmetric_difference"):
    rule(SetVariable, _name)(_set_method(_name))


@rule(SetVariable, "issubset")
def _issubset(tx, s, other):
    return ConstantVariable(set(s.items) <= set(_set_items(tx, other)))


@rule(SetVariable, "copy")
def _set_copy(tx, s):
    return SetVariable(SetEntries.over(s.items.table.copy(), s.items.__getitem__))  # laid out as set.copy() lays it

