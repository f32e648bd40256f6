"""Python values that are fixed during capture: numbers, strings, None, dtypes, ..."""
from __future__ import annotations

import enum
import sys
import types

import torch

from .base import AttributeMissing, Variable, unsupported

# Types whose instances are immutable, so an attribute read or a method call
# on them can be computed now, and whose value can be embedded in generated code.
CONSTANT_TYPES = (
    int, float, bool, str, bytes, complex, type(None), type(Ellipsis), type(NotImplemented),
    range, slice, frozenset, torch.dtype, torch.device, torch.layout, torch.memory_format,
    torch.finfo, torch.iinfo, torch.Size,
    # Symbolic sizes and numbers (dynamic_dims.py): computed with as numbers, guarded by the
    # shape environment where a decision depends on their value.
    torch.SymInt, torch.SymFloat, torch.SymBool,
    # Code objects are immutable; a read of ``fn.__code__`` is covered by fn's identity guard.
    types.CodeType,
)


_EXACT_CONSTANT_TYPES = frozenset(CONSTANT_TYPES)
# What a class body defines that runs as Python code when the value is computed with.
_PYTHON_CODE = (types.FunctionType, property, classmethod, staticmethod)


def is_constant_value(value) -> bool:
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return all(is_constant_value(v) for v in value)
    if type(value) is slice:  # a graph break hands over slices of tensors, too
        return all(is_constant_value(v) for v in (value.start, value.stop, value.step))
    return (isinstance(value, CONSTANT_TYPES) and _computes_in_c(type(value))) or is_numpy_scalar(value)


def _computes_in_c(cls: type) -> bool:
    """Whether an instance is a value that computing with runs no code of the program: a
    constant type itself, an enum (its members are fixed), or a subclass that adds neither
    methods nor instance attributes. A subclass of ``int`` or ``str`` with methods of its
    own (``__lt__`` that empties a list) is an object, as is one whose instances carry
    attributes (a value guard would not see them change): folding would run its methods
    now, once, outside the trace."""
    if cls in _EXACT_CONSTANT_TYPES or issubclass(cls, enum.Enum):
        return True
    if cls.__dictoffset__:
        return False
    for klass in cls.__mro__:
        if klass in _EXACT_CONSTANT_TYPES or klass.__module__ == "builtins":
            return True
        if any(isinstance(v, _PYTHON_CODE) for v in vars(klass).values()):
            return False
    return True


def is_numpy_scalar(value) -> bool:
    """A numpy integer, float or bool scalar (``np.int64(3)``): immutable, computed with now.
    (numpy is not a dependency: without it imported there are no such values.)"""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.integer, np.floating, np.bool_))


def is_numpy_scalar_type(cls) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(cls, type) and issubclass(cls, (np.integer, np.floating, np.bool_))


_SYMBOLIC_TYPES = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


class ConstantVariable(Variable):
    def __init__(self, value, source=None):
        self.value = value
        self.source = source

    def python_type(self):
        return _SYMBOLIC_TYPES.get(type(self.value)) or type(self.value)

    def is_constant(self):
        return True

    def as_constant(self):
        """The value as Python computes with it. A symbolic size or number (dynamic_dims.py)
        is specialized to its example value here, under a guard: whatever folds it with
        a Python function (``str``, ``format``, ``range``...) sees a plain number.
        Arithmetic and comparisons keep it symbolic (``symbolic_value``)."""
        if type(self.value) in _SYMBOLIC_TYPES:
            return self.value.node.guard_value()
        return self.value

    def symbolic_value(self):
        """The value, symbolic sizes and numbers as they are (for arithmetic on them)."""
        return self.value

    def truthy(self, tx):
        return bool(self.value)

    def getattr(self, tx, name):
        if type(self.value) is torch.device and name in ("__enter__", "__exit__"):
            from .device_modes import device_block_method  # `with torch.device(d):`

            return device_block_method(self.value, name)
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            raise AttributeMissing(name)
        if isinstance(attr, type):  # ``value.__class__``: the class itself (``is CodeType`` holds)
            from .objects import ClassVariable

            return ClassVariable(attr)
        if callable(attr) and not isinstance(attr, CONSTANT_TYPES):
            from .functions import BoundConstantMethod

            return BoundConstantMethod(self.value, name)
        if is_constant_value(attr) or isinstance(attr, (tuple, frozenset)):
            return ConstantVariable(attr)
        # A mutable value hanging off a constant (an enum member's dataclass value): an
        # object of its own, read (and guarded) through the constant's source.
        from ..sources import AttrSource

        return tx.wrap(attr, AttrSource(self.source, name) if self.source is not None else None)

    def iterate(self, tx):
        if isinstance(self.value, frozenset):
            from .hashing import note_order_read

            note_order_read(list(self.value))
        if isinstance(self.value, (str, bytes, range, tuple, frozenset, torch.Size)):
            return [ConstantVariable(v) for v in self.value]
        unsupported(f"iterating over {type(self.value).__name__}")

    def length(self, tx):
        try:
            return len(self.value)
        except TypeError:
            unsupported(f"len() of {type(self.value).__name__}")

    def __repr__(self):
        return f"ConstantVariable({self.value!r})"


NONE = ConstantVariable(None)
