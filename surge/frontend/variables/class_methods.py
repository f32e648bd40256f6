"""Attributes of classes that need more than a lookup: ``cls.__subclasses__()`` and
``super()`` inside a classmethod."""
from __future__ import annotations

import types

from ..sources import ConstSource
from .class_attributes import guard_super_entry
from .base import AttributeMissing, Variable, raise_in_user_code
from .objects import ClassVariable
from .torch_function import DEFAULT_TORCH_FUNCTION, DefaultTorchFunctionVariable


class SubclassesMethodVariable(Variable):
    """``cls.__subclasses__`` (``type``'s method): the direct subclasses as they are now,
    guarded (defining another subclass recompiles)."""

    def __init__(self, class_var: ClassVariable):
        self.class_var = class_var

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        from .containers import ListVariable

        if args or kwargs:
            raise_in_user_code(TypeError, "__subclasses__() takes no arguments")
        cls = self.class_var.cls
        found = cls.__subclasses__()
        source = self.class_var.source or ConstSource(cls, cls.__qualname__)
        refs = "[" + ", ".join(tx.consts.ref(c, c.__name__) for c in found) + "]"
        tx.guards.add(source, f"{{v}}.__subclasses__() == {refs}",
                      f"{source.name()}.__subclasses__() == {[c.__qualname__ for c in found]}")
        return ListVariable([ClassVariable(c, ConstSource(c, c.__qualname__)) for c in found])


def super_class_attribute(tx, super_var, name: str):
    """``super().name`` in a classmethod: the next class of ``cls``'s MRO; its classmethods
    bind to ``cls``, plain functions stay unbound."""
    from .functions import UserFunctionVariable, UserMethodVariable

    mro = super_var.self_var.cls.__mro__
    start = mro.index(super_var.cls) + 1 if super_var.cls in mro else 0
    for klass in mro[start:]:
        if name not in klass.__dict__:
            continue
        value = klass.__dict__[name]
        guard_super_entry(tx, super_var.self_var.cls, super_var.cls, name, value)
        if value is DEFAULT_TORCH_FUNCTION:  # torch's own, not traced: see torch_function.py
            return DefaultTorchFunctionVariable(super_var.self_var.cls)
        if isinstance(value, classmethod):
            return UserMethodVariable(UserFunctionVariable(value.__func__), super_var.self_var)
        if isinstance(value, staticmethod):
            return tx.wrap(value.__func__, None)
        if isinstance(value, types.FunctionType):
            return UserFunctionVariable(value)
        return ClassVariable(klass, super_var.self_var.source).getattr(tx, name)
    raise AttributeMissing(name)
