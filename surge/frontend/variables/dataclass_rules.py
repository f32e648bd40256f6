"""``dataclasses.fields`` and ``dataclasses.is_dataclass`` on values whose class is known.

A dataclass's fields are fixed when the class is created, so they follow from
the class: known statically for objects the trace creates, and fixed by the type
guard for objects read from the inputs. ``fields()`` gives read-only field
records (name, default, type), enough for code that walks an output dataclass.
"""
from __future__ import annotations

import dataclasses

from .base import AttributeMissing, Variable, unsupported
from .builtins import builtin
from .constant import ConstantVariable, is_constant_value
from .containers import TupleVariable


def _class_of(var: Variable) -> type:
    from .objects import ClassVariable

    if isinstance(var, ClassVariable):
        return var.cls
    return var.python_type()


class FieldVariable(Variable):
    """One ``dataclasses.Field`` of a class (a read-only record)."""

    def __init__(self, field: dataclasses.Field):
        self.field = field

    def python_type(self):
        return dataclasses.Field

    def truthy(self, tx):
        return True

    def getattr(self, tx, name):
        if name in ("name", "default", "default_factory", "init", "repr", "compare", "kw_only"):
            value = getattr(self.field, name)
            if is_constant_value(value):
                return ConstantVariable(value)
            if value is dataclasses.MISSING:
                return MissingVariable()
            unsupported(f"dataclass field attribute {name!r} holding a {type(value).__qualname__}")
        if name == "type":
            return tx.wrap(self.field.type, None) if isinstance(self.field.type, (type, str)) \
                else unsupported("a dataclass field type that is not a class")
        raise AttributeMissing(name)


class MissingVariable(Variable):
    """``dataclasses.MISSING``: only compared by identity."""

    def python_type(self):
        return type(dataclasses.MISSING)

    def truthy(self, tx):
        return True

    def identity_key(self):
        from .containers import IdentityKey

        return IdentityKey(self, dataclasses.MISSING)


@builtin(dataclasses.fields)
def _fields(tx, obj):
    cls = _class_of(obj)
    if not dataclasses.is_dataclass(cls):
        unsupported(f"dataclasses.fields() of {cls.__qualname__}, which is not a dataclass")
    return TupleVariable([FieldVariable(f) for f in dataclasses.fields(cls)])


@builtin(dataclasses.is_dataclass)
def _is_dataclass(tx, obj):
    return ConstantVariable(dataclasses.is_dataclass(_class_of(obj)))
