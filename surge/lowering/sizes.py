"""Index and size expressions: sympy, with integer floor-division and modulo.

Every size, stride and index in the loop IR is a sympy expression. Index
expressions are always non-negative, so floor division and modulo mean the
same thing in Python, C and Triton; the two functions below keep them as
opaque integer operations instead of sympy's rational ``floor(a/b)`` forms,
which simplify slowly and print badly.
"""
from __future__ import annotations

import functools

import sympy


class FloorDiv(sympy.Function):
    """``a // b`` for non-negative integers."""
    is_integer = True
    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        if isinstance(a, FloorDiv):  # (x // p) // q == x // (p * q)
            return FloorDiv(a.args[0], a.args[1] * b)
        return None


class Mod(sympy.Function):
    """``a % b`` for non-negative integers."""
    is_integer = True
    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if b == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        return None


@functools.lru_cache(maxsize=None)
def index_symbol(prefix: str, k: int) -> sympy.Symbol:
    return sympy.Symbol(f"{prefix}{k}", integer=True, nonnegative=True)


def sym(value) -> sympy.Expr:
    """Turn an int, SymInt-like or sympy value into a sympy expression."""
    if isinstance(value, sympy.Basic):
        return value
    return sympy.Integer(int(value))


def product(values) -> sympy.Expr:
    out = sympy.Integer(1)
    for v in values:
        out = out * v
    return out


def contiguous_strides(shape) -> tuple:
    strides, running = [], sympy.Integer(1)
    for size in reversed(shape):
        strides.append(running)
        running = running * size
    return tuple(reversed(strides))


def decompose(linear, shape) -> list:
    """Per-dimension indices of a row-major linear index over ``shape``."""
    out, stride = [], sympy.Integer(1)
    for k in reversed(range(len(shape))):
        idx = FloorDiv(linear, stride)
        if k > 0:
            idx = Mod(idx, shape[k])
        out.append(idx)
        stride = stride * shape[k]
    return list(reversed(out))


def linear_coefficient(expr: sympy.Expr, var: sympy.Symbol):
    """Coefficient of ``var`` if ``expr`` is affine in it, else None."""
    if var not in expr.free_symbols:
        return sympy.Integer(0)
    for f in expr.atoms(FloorDiv, Mod):
        if var in f.free_symbols:
            return None
    coeff = sympy.expand(expr).coeff(var)
    if var in coeff.free_symbols:
        return None
    return coeff

