"""``types.MappingProxyType(d)`` and a dict view's ``.mapping``: a read-only live view of
a dict made or read in the trace. It reads its dict whenever it is used (a write to the
dict after the proxy was made is seen through it), compares as its dict compares, and is
rebuilt over the very dict where a frame returns it or breaks with it alive."""
from __future__ import annotations

import types

from .base import AttributeMissing, Variable, unsupported
from .builtins import builtin
from .constant import ConstantVariable
from .containers import DictVariable

_READ_METHODS = ("keys", "values", "items", "get", "copy")


class MappingProxyVariable(Variable):
    def __init__(self, d: DictVariable):
        self.dict = d

    def python_type(self):
        return types.MappingProxyType

    def truthy(self, tx):
        return bool(self.dict.items)

    def length(self, tx):
        return len(self.dict.items)

    def iterate(self, tx):
        return self.dict.iterate(tx)

    def make_iterator(self, tx):
        return self.dict.make_iterator(tx, "keys")

    def getitem(self, tx, key: Variable):
        return self.dict.getitem(tx, key)

    def contains(self, tx, item: Variable) -> bool:
        from ..interpreter.operators import contains

        return contains(tx, self.dict, item)

    def getattr(self, tx, name):
        if name in _READ_METHODS:
            return self.dict.getattr(tx, name)
        if hasattr(dict, name) and not hasattr(types.MappingProxyType, name):  # update, pop, __setitem__, ...
            raise AttributeMissing(name)
        if hasattr(types.MappingProxyType, name):
            unsupported(f"mappingproxy.{name} in compiled code")
        raise AttributeMissing(name)

    def str_or_repr(self, tx, fn) -> Variable:
        if fn not in (str, repr) or not self.dict.is_constant():
            unsupported(f"{fn.__name__}() of a mappingproxy of non-constant values")
        return ConstantVariable(fn(types.MappingProxyType(self.dict.as_constant())))

    def __repr__(self):
        return f"MappingProxyVariable({self.dict})"


@builtin(types.MappingProxyType)
def _mapping_proxy(tx, mapping):
    if isinstance(mapping, MappingProxyVariable):
        return MappingProxyVariable(mapping.dict)
    if isinstance(mapping, DictVariable):
        return MappingProxyVariable(mapping)
    unsupported(f"types.MappingProxyType() of {mapping}")
