"""The data-model protocols of user objects that the trace calls: truth and ``len()``
through the class's own Python ``__bool__`` / ``__len__``."""
from __future__ import annotations

import types

from .base import Variable, raise_in_user_code, unsupported
from .objects import _MISSING, call_python_dunder, dunder_lookup


def python_truth(tx, var: Variable, cls: type) -> bool | None:
    """``bool(obj)`` through the class's Python ``__bool__``, else its Python ``__len__``;
    None when neither is a Python method (the caller's rules apply)."""
    method = dunder_lookup(tx, cls, "__bool__")
    if isinstance(method, types.FunctionType):
        result = call_python_dunder(tx, var, "__bool__", [])
        if not result.is_constant():  # a value known only when the graph runs
            unsupported(f"{cls.__qualname__}.__bool__ returned {result}, not a constant")
        if type(result.as_constant()) is not bool:
            raise_in_user_code(TypeError, f"__bool__ should return bool, returned {type(result.as_constant()).__name__}")
        return result.as_constant()
    if method is _MISSING and isinstance(dunder_lookup(tx, cls, "__len__"), types.FunctionType):
        return var.length(tx) != 0
    return None


def length_result(result: Variable) -> int:
    """What ``len()`` makes of ``__len__``'s result (an int >= 0, else TypeError/ValueError)."""
    if not result.is_constant():
        unsupported(f"__len__ returned {result}, not a Python int")
    value = result.as_constant()
    if not isinstance(value, int):
        raise_in_user_code(TypeError, f"'{type(value).__name__}' object cannot be interpreted as an integer")
    if value < 0:
        raise_in_user_code(ValueError, "__len__() should return >= 0")
    return int(value)
