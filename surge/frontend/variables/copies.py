"""``copy.deepcopy`` of Python state during capture (configs, their dicts, lists).

Library code deep-copies configuration objects to derive variants of them (an
encoder-decoder config split into its decoder half). The copy is made
symbolically: containers and plain objects become new trace-made values whose
items are copies of the original's, read through guarded sources, so the copy
is fresh on every call, as in eager. Immutable values, classes and functions are
shared, as ``copy`` does. Tensors, modules and objects that customise copying
(``__deepcopy__``, ``__reduce__``, ``__getstate__``, ``__setstate__``) are refused.
"""
from __future__ import annotations

import copy

from ..sources import AttrSource
from .base import Variable, unsupported
from .builtins import BuiltinVariable, builtin
from .constant import ConstantVariable
from .containers import DictVariable, ListVariable, SetVariable, SliceVariable, TupleVariable, _key_of
from .functions import UserFunctionVariable
from .dict_storage import InstanceDictVariable
from .objects import (
    _MISSING, ClassVariable, NewObjectVariable, PythonModuleVariable, UserObjectVariable, static_lookup,
)

# Classes whose copying is the default one: a new instance with a copied __dict__.
_DEFAULT_COPY_HOOKS = {name: static_lookup(object, name) for name in ("__reduce_ex__", "__reduce__", "__getstate__")}


@builtin(copy.deepcopy)
def _deepcopy(tx, value, memo=None):
    if memo is not None:
        unsupported("copy.deepcopy() with a memo dict")
    return deep_copy(tx, value, {})


def _immutable(value: Variable) -> bool:
    """Shared by a deep copy: constants copy.deepcopy hands back, and tuples of them (a
    list of constants ``is_constant()`` too, but it is copied; a frozenset is always
    made anew, through its __reduce_ex__)."""
    if isinstance(value, ConstantVariable):
        return copy.deepcopy(value.value) is value.value
    if isinstance(value, TupleVariable):
        return all(_immutable(item) for item in value.items)
    return False


def deep_copy(tx, value: Variable, memo: dict) -> Variable:
    if _immutable(value) or isinstance(value, (ClassVariable, UserFunctionVariable, BuiltinVariable,
                                               PythonModuleVariable)):
        return value  # immutable, or copied as itself (classes, functions, modules)
    if isinstance(value, ConstantVariable):  # a constant frozenset, or a tuple holding one
        return ConstantVariable(copy.deepcopy(value.value))
    key = id(value)
    if key in memo:
        return memo[key]
    if isinstance(value, ListVariable):
        new = memo[key] = ListVariable([])
        new.items = [deep_copy(tx, item, memo) for item in value.items]
        return new
    if isinstance(value, TupleVariable):
        return memo.setdefault(key, TupleVariable([deep_copy(tx, i, memo) for i in value.items], cls=value.cls))
    if isinstance(value, DictVariable):
        new = memo[key] = DictVariable({}, cls=value.cls)
        new.default_factory = value.default_factory  # a defaultdict's, shared as copy does
        new.items.update((k, deep_copy(tx, v, memo)) for k, v in value.items.items())
        return new
    if isinstance(value, SetVariable):
        copies = [deep_copy(tx, item, memo) for item in value.items.values()]
        return memo.setdefault(key, SetVariable({_key_of(tx, c): c for c in copies}, frozen=value.frozen))
    if isinstance(value, SliceVariable):  # copied anew, with copies of its bounds
        return memo.setdefault(key, SliceVariable(*(deep_copy(tx, v, memo) for v in (value.start, value.stop, value.step))))
    if isinstance(value, InstanceDictVariable):
        return deep_copy(tx, _whole_instance_dict(tx, value.obj_var), memo)
    if isinstance(value, UserObjectVariable):
        _check_default_copy(type(value.obj))
        new = memo[key] = NewObjectVariable(type(value.obj))
        new.attrs.update(deep_copy(tx, _whole_instance_dict(tx, value), memo).items)
        return new
    if isinstance(value, NewObjectVariable) and value.storage is None:
        _check_default_copy(value.cls)
        new = memo[key] = NewObjectVariable(value.cls)
        new.attrs.update({k: deep_copy(tx, v, memo) for k, v in value.attrs.items()})
        return new
    unsupported(f"copy.deepcopy() of {value}")


def _check_default_copy(cls: type) -> None:
    hooks = [name for name, default in _DEFAULT_COPY_HOOKS.items() if static_lookup(cls, name) is not default]
    hooks += [name for name in ("__deepcopy__", "__setstate__") if static_lookup(cls, name) is not _MISSING]
    if hooks or cls.__dictoffset__ == 0:
        unsupported(f"copy.deepcopy() of a {cls.__qualname__} (it customises copying: {hooks or '__slots__'})")
    base = next(k for k in cls.__mro__ if k.__module__ == "builtins")
    if base is not object:  # a list or tuple subclass: its items and its own __new__ are copied too
        unsupported(f"copy.deepcopy() of a {cls.__qualname__} (a {base.__name__} subclass)")


def _whole_instance_dict(tx, obj_var: UserObjectVariable) -> DictVariable:
    """Every attribute of an input object, each guarded, with the trace's own writes applied."""
    if obj_var.source is None:
        unsupported(f"copy.deepcopy() of a {type(obj_var.obj).__qualname__} not reachable from the inputs")
    whole = tx.wrap(obj_var.obj.__dict__, AttrSource(obj_var.source, "__dict__"))
    items = dict(whole.items)
    for name in list(items):
        stored = tx.side_effects.attribute(obj_var.obj, name)
        if stored is not None:
            items[name] = stored
    return DictVariable(items)

