"""A class's own ``__getattr__`` (nn.Modules and plain classes): Python calls it when
normal attribute lookup fails, so capture inlines it at that point.

Whether lookup fails depends on the instance's own ``__dict__`` (and, for a module,
on its parameter/buffer/submodule tables that ``nn.Module.__getattr__`` reads), so
the name's absence there is guarded: setting the attribute later recompiles.
"""
from __future__ import annotations

import types

import torch

from .base import AttributeMissing, RaisedInUserCode, Variable, raise_in_user_code

MODULE_TABLES = ("_parameters", "_buffers", "_modules")


def user_getattr_hook(cls: type):
    """The class's ``__getattr__`` when it is a Python function other than nn.Module's."""
    from .objects import _MISSING, static_lookup

    hook = static_lookup(cls, "__getattr__")
    if hook is _MISSING or hook is static_lookup(torch.nn.Module, "__getattr__"):
        return None
    return hook if isinstance(hook, types.FunctionType) else None


def call_getattr_hook(tx, var: Variable, hook, name: str) -> Variable:
    """``type(obj).__getattr__(obj, name)`` traced; an AttributeError it raises is the
    attribute being missing (``hasattr`` / ``getattr(..., default)`` see it as such)."""
    from .constant import ConstantVariable
    from .objects import bind_class_attribute

    obj = var.obj
    src = var.child_source()
    if src is not None:
        tx.guards.add(src, f"{name!r} not in {{v}}.__dict__", f"{src.name()} has no instance attribute {name!r}")
    try:
        return bind_class_attribute(tx, var, type(obj), "__getattr__", hook).call(tx, [ConstantVariable(name)], {})
    except RaisedInUserCode as e:
        if issubclass(e.exc_type, AttributeError):
            raise AttributeMissing(name) from None
        raise


def module_table_lookup(tx, var, name: str) -> Variable:
    """``nn.Module.__getattr__``: the parameter, buffer or submodule named ``name``."""
    from ..sources import ModuleDictSource

    src = var.child_source()
    for table in MODULE_TABLES:
        entries = var.obj.__dict__.get(table)
        if entries is not None and name in entries:
            return tx.wrap(entries[name], ModuleDictSource(src, table, name) if src is not None else None)
    raise AttributeMissing(name)


class ModuleGetattrVariable(Variable):
    """``super().__getattr__`` of nn.Module, called from a subclass's own ``__getattr__``."""

    def __init__(self, module_var):
        self.module_var = module_var

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        (name,) = args
        name = name.as_constant()
        try:
            return module_table_lookup(tx, self.module_var, name)
        except AttributeMissing:
            src = self.module_var.child_source()
            if src is not None:
                absent = " and ".join(f"{name!r} not in {{v}}.{table}" for table in MODULE_TABLES)
                tx.guards.add(src, absent, f"{src.name()} has no parameter, buffer or submodule {name!r}")
            raise_in_user_code(AttributeError,
                               f"'{type(self.module_var.obj).__name__}' object has no attribute '{name}'")
