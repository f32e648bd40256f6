"""``os.environ`` reads in compiled code: the value is folded, guarded by value.

Libraries read switches from the environment (``os.environ.get("X", "0")``) in
code that runs on every call. The read is done now and the entry is guarded on
``os.environ.get(key)`` being the same string (or absent), so changing the
variable recompiles. Writes to the environment are refused.
"""
from __future__ import annotations

import os

from .base import Variable, raise_in_user_code, unsupported
from .constant import NONE, ConstantVariable

READ_METHODS = ("get", "__getitem__", "__contains__")


class EnvironMethodVariable(Variable):
    def __init__(self, environ_var, name: str):
        self.environ_var = environ_var
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        if kwargs or not args or not args[0].is_constant() or not isinstance(args[0].as_constant(), str):
            unsupported(f"os.environ.{self.name}() with a non-constant key")
        key = args[0].as_constant()
        value = self.environ_var.obj.get(key)
        source = self.environ_var.source
        tx.guards.add(source, f"{{v}}.get({key!r}) == {value!r}", f"{source.name()}.get({key!r}) == {value!r}")
        if self.name == "__contains__":
            return ConstantVariable(value is not None)
        if value is None:
            if self.name == "get":
                return args[1] if len(args) > 1 else NONE
            raise_in_user_code(KeyError, repr(key), args=(key,))
        return ConstantVariable(value)


def environ_method(var, name: str):
    """The modelled method ``name`` of an ``os.environ`` object, or None."""
    if type(var.obj) is not os._Environ or var.source is None:
        return None
    if name not in READ_METHODS:
        unsupported(f"os.environ.{name}() in compiled code")
    return EnvironMethodVariable(var, name)
