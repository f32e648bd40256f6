"""``dict.keys()``, ``dict.values()`` and ``dict.items()``: live views of a dict.

A view reads its dict whenever it is used, so ``k = d.keys(); d["new"] = 1; len(k)``
counts the new key, as in CPython. Keys and items views are set-like: ``&``, ``|``,
``-``, ``^`` with any iterable give a ``set``, ``==`` compares with sets and other
views as sets do, ``isdisjoint`` works; values views compare by identity only.
"""
from __future__ import annotations

from .base import AttributeMissing, Variable, unsupported
from .constant import ConstantVariable
from .containers import DictVariable, SetVariable, TupleVariable, _key_of, key_variable

VIEW_TYPES = {part: type(getattr({}, part)()) for part in ("keys", "values", "items")}


class DictViewVariable(Variable):
    def __init__(self, d: DictVariable, part: str):
        self.dict = d
        self.part = part  # "keys", "values" or "items"

    def python_type(self):
        return VIEW_TYPES[self.part]

    def truthy(self, tx):
        return bool(self.dict.items)

    def length(self, tx):
        return len(self.dict.items)

    def iterate(self, tx):
        items = self.dict.items
        if self.part == "keys":
            return [key_variable(k) for k in items]
        if self.part == "values":
            return list(items.values())
        return [TupleVariable([key_variable(k), v]) for k, v in items.items()]

    def make_iterator(self, tx):
        return self.dict.make_iterator(tx, self.part)

    def is_set_like(self) -> bool:
        return self.part != "values"

    def as_set(self, tx) -> SetVariable:
        """The view's elements as a set (keys and items views)."""
        return SetVariable({_key_of(tx, v): v for v in self.iterate(tx)})

    def contains(self, tx, item: Variable) -> bool:
        from ..interpreter.operators import compare_equal

        if self.part == "keys":
            return _key_of(tx, item) in self.dict.items
        if self.part == "items":
            if isinstance(item, TupleVariable) and len(item.items) == 2:
                key, value = item.items
            elif item.is_constant() and isinstance(item.as_constant(), tuple) and len(item.as_constant()) == 2:
                key, value = map(ConstantVariable, item.as_constant())
            else:
                return False
            k = _key_of(tx, key)
            return k in self.dict.items and compare_equal(tx, self.dict.items[k], value)
        return any(compare_equal(tx, v, item) for v in self.dict.items.values())

    def str_or_repr(self, tx, fn) -> Variable:
        """``repr(view)``: ``dict_keys(['a', 'b'])``."""
        if fn not in (str, repr) or not self.dict.is_constant():
            unsupported(f"{fn.__name__}() of a dict view of non-constant values")
        return ConstantVariable(fn(getattr(self.dict.as_constant(), self.part)()))

    def getattr(self, tx, name):
        if name == "isdisjoint" and self.is_set_like():
            return ViewMethodVariable(self, name)
        if name == "mapping":  # a read-only live view of the dict itself
            from .mapping_proxies import MappingProxyVariable

            return MappingProxyVariable(self.dict)
        if hasattr(self.python_type(), name):
            unsupported(f"{self.python_type().__name__}.{name} in compiled code")
        raise AttributeMissing(name)

    def __repr__(self):
        return f"DictViewVariable({self.part} of {self.dict})"


class ViewMethodVariable(Variable):
    def __init__(self, view: DictViewVariable, name: str):
        self.view = view
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        (other,) = args
        mine = self.view.as_set(tx).items
        return ConstantVariable(not any(_key_of(tx, v) in mine for v in other.iterate(tx)))


def as_set_operand(tx, value):
    """A set for a set-like view (``d.keys() & other``), else the value itself."""
    if isinstance(value, DictViewVariable) and value.is_set_like():
        return value.as_set(tx)
    return value


def set_of_iterable(tx, value) -> SetVariable:
    """The other operand of a view's set operation: any iterable, as a set."""
    if isinstance(value, SetVariable):
        return value
    return SetVariable({_key_of(tx, v): v for v in value.iterate(tx)})


def view_equal(tx, a, b) -> bool | None:
    """``a == b`` where one side is a view; None when neither is."""
    views = [v for v in (a, b) if isinstance(v, DictViewVariable)]
    if not views:
        return None
    if any(not v.is_set_like() for v in views):
        return a is b  # values views have no __eq__ of their own
    other = b if a is views[0] else a
    if not (isinstance(other, (SetVariable, DictViewVariable)) and
            (not isinstance(other, DictViewVariable) or other.is_set_like())):
        return False
    return set(as_set_operand(tx, a).items) == set(as_set_operand(tx, b).items)
