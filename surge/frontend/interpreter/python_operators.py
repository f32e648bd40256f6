"""Python operators on objects of user classes: the data model's dunder methods, inlined.

``a + b`` on an object whose class defines ``__add__`` / ``__radd__`` in Python
(and the comparisons, in-place and unary forms) calls those methods as CPython
does: the left operand's method, then the right operand's reflected one when the
first is missing or returns ``NotImplemented``; the right operand first when its
class is a subclass of the left's (for arithmetic, one that overrides the reflected
method).
"""
from __future__ import annotations

import operator
import types

from ..variables.base import Variable, raise_in_user_code
from ..variables.constant import ConstantVariable
from ..variables.objects import (
    _MISSING, NewObjectVariable, NNModuleVariable, ObjectVariable, call_python_dunder, dunder_lookup,
)

_ARITHMETIC = {
    operator.add: ("add", "+"), operator.sub: ("sub", "-"), operator.mul: ("mul", "*"),
    operator.truediv: ("truediv", "/"), operator.floordiv: ("floordiv", "//"), operator.mod: ("mod", "%"),
    operator.pow: ("pow", "**"), operator.matmul: ("matmul", "@"), operator.and_: ("and", "&"),
    operator.or_: ("or", "|"), operator.xor: ("xor", "^"), operator.lshift: ("lshift", "<<"),
    operator.rshift: ("rshift", ">>"),
}
# (method, reflected method, symbol) of each binary operator.
BINARY_DUNDERS = {fn: (f"__{name}__", f"__r{name}__", symbol) for fn, (name, symbol) in _ARITHMETIC.items()}
BINARY_DUNDERS.update({
    operator.lt: ("__lt__", "__gt__", "<"), operator.le: ("__le__", "__ge__", "<="),
    operator.gt: ("__gt__", "__lt__", ">"), operator.ge: ("__ge__", "__le__", ">="),
    operator.eq: ("__eq__", "__eq__", "=="), operator.ne: ("__ne__", "__ne__", "!="),
})
_NUMBERS = (int, float, complex, bool, type(None))
_COMPARISONS = {operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne}
INPLACE_DUNDERS = {
    operator.iadd: "__iadd__", operator.isub: "__isub__", operator.imul: "__imul__",
    operator.itruediv: "__itruediv__", operator.ifloordiv: "__ifloordiv__", operator.imod: "__imod__",
    operator.ipow: "__ipow__", operator.imatmul: "__imatmul__", operator.iand: "__iand__",
    operator.ior: "__ior__", operator.ixor: "__ixor__", operator.ilshift: "__ilshift__",
    operator.irshift: "__irshift__",
}
UNARY_DUNDERS = {operator.neg: "__neg__", operator.pos: "__pos__", operator.invert: "__invert__",
                 operator.abs: "__abs__", operator.index: "__index__"}


def is_user_object(var: Variable) -> bool:
    """An instance of a user class (read from the inputs or made in the trace)."""
    return isinstance(var, NewObjectVariable) or (
        isinstance(var, ObjectVariable) and not isinstance(var, NNModuleVariable))


def _class_of(var: Variable) -> type:
    return var.cls if isinstance(var, NewObjectVariable) else type(var.obj)


def _call(tx, var: Variable, name: str, args: list) -> Variable | None:
    """``type(var).<name>(var, *args)``; None when the class has no Python method of that
    name or it returned NotImplemented."""
    if not is_user_object(var):
        return None
    if dunder_lookup(tx, _class_of(var), name) is None:  # `__iadd__ = None` blocks the operator
        raise_in_user_code(TypeError, "'NoneType' object is not callable")
    result = call_python_dunder(tx, var, name, args)
    if result is None or (result.is_constant() and result.as_constant() is NotImplemented):
        return None
    return result


def user_binary_op(tx, fn, a: Variable, b: Variable) -> Variable | None:
    """``a <fn> b`` through the operands' Python dunder methods, or None when neither
    operand is a user object (the caller's rules apply). Equality of objects without
    ``__eq__`` is left to the caller (identity)."""
    names = BINARY_DUNDERS.get(fn)
    if names is None or not (is_user_object(a) or is_user_object(b)):
        return None
    method, reflected, symbol = names
    attempts = [(a, method, b), (b, reflected, a)]
    if is_user_object(b):
        a_cls, b_cls = (_class_of(a) if is_user_object(a) else a.python_type()), _class_of(b)
        if a_cls is b_cls and fn not in _COMPARISONS:
            attempts.pop()  # Python tries no reflected method between operands of one class
        elif a_cls is not b_cls and a_cls in b_cls.__mro__ and (
                fn in _COMPARISONS or dunder_lookup(tx, b_cls, reflected) is not dunder_lookup(tx, a_cls, reflected)):
            # A subclass (by its MRO: a virtual subclass of an ABC is not one) goes first: for a
            # comparison always, for arithmetic when it overrides the reflected method.
            attempts.reverse()
    exhausted = 0  # operands known not to do it: no such method, or NotImplemented
    for var, name, other in attempts:
        if is_user_object(var):
            method = dunder_lookup(tx, _class_of(var), name)
            if method is _MISSING or method is None:
                exhausted += 1
                continue
            if method is object.__ne__:  # the default: the object's own __eq__, inverted
                method = dunder_lookup(tx, _class_of(var), "__eq__")
                if isinstance(method, types.FunctionType):
                    result = call_python_dunder(tx, var, "__eq__", [other])
                    if not (result.is_constant() and result.as_constant() is NotImplemented):
                        return ConstantVariable(not result.truthy(tx))
                    exhausted += 1
                    continue
                if method is object.__eq__:
                    exhausted += 1  # NotImplemented unless the two are one object (identity, below)
                    continue
            if not isinstance(method, types.FunctionType):
                continue  # a C method (a builtin base class): left to the caller's rules
            result = call_python_dunder(tx, var, name, [other])
            if not (result.is_constant() and result.as_constant() is NotImplemented):
                return result
            exhausted += 1
        elif var.is_constant() and type(var.as_constant()) in _NUMBERS:
            exhausted += 1  # numbers' methods return NotImplemented for user objects
    if fn in (operator.eq, operator.ne) or exhausted < len(attempts):
        return None  # identity equality, or the caller's rules (a tensor, a sequence, ...)
    raise_in_user_code(TypeError, f"unsupported operand type(s) for {symbol}: '{_type_name(a)}' and '{_type_name(b)}'")


def user_inplace_op(tx, fn, a: Variable, b: Variable) -> Variable | None:
    """``a <fn>= b`` through ``a``'s own in-place method, or None (the binary form applies)."""
    name = INPLACE_DUNDERS.get(fn)
    return _call(tx, a, name, [b]) if name is not None else None


def user_unary_op(tx, fn, value: Variable) -> Variable | None:
    name = UNARY_DUNDERS.get(fn)
    if name is None or not is_user_object(value):
        return None
    if dunder_lookup(tx, _class_of(value), name) is _MISSING:
        raise_in_user_code(TypeError, f"bad operand type for {fn.__name__}: '{_type_name(value)}'")
    return _call(tx, value, name, [])


def _type_name(var: Variable) -> str:
    try:
        return (_class_of(var) if is_user_object(var) else var.python_type()).__name__
    except Exception:  # a value whose type the trace does not know
        return type(var).__name__
