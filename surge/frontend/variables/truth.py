"""The truth value of an object from its class's Python ``__bool__`` or ``__len__``
result, with the errors CPython raises for a bad one."""
from __future__ import annotations

from .base import Variable, raise_in_user_code, unsupported


def checked_truth(cls: type, method: str, result: Variable) -> bool:
    if not result.is_constant():
        unsupported(f"{cls.__qualname__}.{method} returned {result}, not a constant")
    value = result.as_constant()
    if method == "__bool__" and type(value) is not bool:
        raise_in_user_code(TypeError, f"__bool__ should return bool, returned {type(value).__name__}")
    if method == "__len__" and not isinstance(value, int):
        raise_in_user_code(TypeError, f"'{type(value).__name__}' object cannot be interpreted as an integer")
    if method == "__len__" and value < 0:
        raise_in_user_code(ValueError, "__len__() should return >= 0")
    return bool(value)
