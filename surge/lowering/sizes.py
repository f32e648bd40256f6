"""Index and size expressions: sympy, with integer floor-division and modulo.

Every size, stride and index in the loop IR is a sympy expression. Index
expressions are always non-negative, so floor division and modulo mean the
same thing in Python, C and Triton; the two functions below keep them as
opaque integer operations instead of sympy's rational ``floor(a/b)`` forms,
which simplify slowly and print badly.
"""
from __future__ import annotations

import functools
import math
import operator

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


def is_index_symbol(symbol: sympy.Symbol) -> bool:
    """A loop or kernel index (``i0``, ``r0``, ``x0``...), not a size symbol (``s0``)."""
    return symbol.name[0] in "irx" and symbol.name[1:].isdigit()


def sym(value) -> sympy.Expr:
    """An int or a size expression as a sympy expression (a SymInt goes through
    ``SizeVars.expr``, which knows the graph's symbols)."""
    if isinstance(value, sympy.Basic):
        return value
    return sympy.Integer(operator.index(value))


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



def _upper_bound(expr: sympy.Expr, bounds: dict):
    """The largest value of a non-negative index ``expr`` with symbols below ``bounds``, or None."""
    total = 0
    for term in sympy.Add.make_args(expr):
        coeff, rest = term.as_coeff_Mul()
        if rest == 1:
            if coeff < 0:   # the bound is for non-negative sums only
                return None
            total += int(coeff)
            continue
        if coeff < 0 or not coeff.is_Integer:
            return None
        if rest in bounds:
            if not getattr(bounds[rest], "is_Integer", True):   # a size symbol: no number to sum
                return None
            top = bounds[rest] - 1
        elif isinstance(rest, Mod) and rest.args[1].is_Integer:
            top = int(rest.args[1]) - 1
        elif isinstance(rest, FloorDiv) and rest.args[1].is_Integer:
            inner = _upper_bound(rest.args[0], bounds)
            if inner is None:
                return None
            top = inner // int(rest.args[1])
        else:
            return None
        total += int(coeff) * top
    return total


def index_below(expr: sympy.Expr, bounds: dict, limit: int) -> bool:
    """Whether index ``expr`` stays in ``[0, limit)`` for every value of its symbols below
    ``bounds`` (proved term by term: non-negative terms whose largest values sum below)."""
    top = _upper_bound(sympy.expand(expr), bounds)
    return top is not None and getattr(sympy.sympify(limit), "is_Integer", False) and top < limit


def _split_by_divisor(expr: sympy.Expr, d: int):
    """``expr`` as (terms divisible by ``d``, the rest)."""
    whole, rest = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(expr):
        coeff, _ = term.as_coeff_Mul()
        if coeff.is_Integer and int(coeff) % d == 0:
            whole += term
        else:
            rest += term
    return whole, rest


def _divide_out(a: sympy.Expr, d: int, bounds: dict):
    """(g, whole, rest) with ``a == g*whole + rest``, ``0 <= rest < g`` and ``g`` dividing ``d``
    (the largest such g among the terms' common factors with ``d``), or None."""
    candidates = set()
    for term in sympy.Add.make_args(a):
        coeff, _ = term.as_coeff_Mul()
        if coeff.is_Integer and int(coeff) > 0:
            candidates.add(math.gcd(int(coeff), d))
    for g in sorted(candidates, reverse=True):
        if g == 1:
            break
        whole, rest = _split_by_divisor(a, g)
        top = _upper_bound(rest, bounds)
        if top is not None and top < g:
            return g, sympy.expand(whole / g), rest
    return None


def _simplify_floordiv_mod(expr, a: sympy.Expr, d: int, bounds: dict) -> sympy.Expr:
    a = sympy.expand(a)
    top = _upper_bound(a, bounds)
    if top is not None and top < d:                    # x // d == 0, x % d == x
        return sympy.Integer(0) if isinstance(expr, FloorDiv) else a
    whole, rest = _split_by_divisor(a, d)
    top = _upper_bound(rest, bounds)
    if top is not None and top < d:
        return sympy.expand(whole / d) if isinstance(expr, FloorDiv) else rest
    if isinstance(expr, Mod) and whole != 0:           # (d*k + x) % d == x % d
        return _simplify_floordiv_mod(expr, rest, d, bounds)
    if isinstance(expr, FloorDiv) and whole != 0 and top is not None:
        # (d*k + x) // d == k + x // d; x a bounded non-negative sum, so that generated code,
        # which divides with truncation, still floors
        return sympy.expand(whole / d) + _simplify_floordiv_mod(expr, rest, d, bounds)
    found = _divide_out(a, d, bounds)
    if found is not None:                              # (g*w + r) with r < g, g | d
        g, w, r = found
        if isinstance(expr, FloorDiv):
            return FloorDiv(w, sympy.Integer(d // g))
        return g * Mod(w, sympy.Integer(d // g)) + r
    return type(expr)(a, sympy.Integer(d))


def _recombine(expr: sympy.Expr) -> sympy.Expr:
    """``c*n*(x // n) + c*(x % n)`` is ``c*x``."""
    terms = list(sympy.Add.make_args(sympy.expand(expr)))
    changed = True
    while changed:
        changed = False
        for k, term in enumerate(terms):
            c1, f = term.as_coeff_Mul()
            if not isinstance(f, FloorDiv):
                continue
            x, n = f.args
            for j, other in enumerate(terms):
                c2, m = other.as_coeff_Mul()
                if isinstance(m, Mod) and m.args == (x, n) and c1 == c2 * n:
                    terms = [t for i, t in enumerate(terms) if i not in (k, j)] + [sympy.expand(c2 * x)]
                    changed = True
                    break
            if changed:
                break
    return sympy.Add(*terms)


def _simplify(expr: sympy.Expr, bounds: dict) -> sympy.Expr:
    if expr.is_Atom:
        return expr
    args = [_simplify(a, bounds) for a in expr.args]
    if isinstance(expr, (FloorDiv, Mod)) and args[1].is_Integer:
        return _simplify_floordiv_mod(expr, args[0], int(args[1]), bounds)
    out = expr.func(*args)
    return _recombine(out) if out.is_Add else out


@functools.lru_cache(maxsize=65536)
def _simplify_cached(expr: sympy.Expr, bounds: tuple) -> sympy.Expr:
    return sympy.expand(_simplify(sympy.expand(expr), dict(bounds)))


def simplify_with_ranges(expr: sympy.Expr, bounds: dict) -> sympy.Expr:
    """``expr`` with the floor divisions and modulos that ``bounds`` (symbol ->
    exclusive upper bound) make trivial removed: with ``x1 < 4``,
    ``(16*x0 + x1) // 16`` is ``x0`` and ``(16*x0 + x1) % 16`` is ``x1``."""
    if not expr.has(FloorDiv, Mod):
        return sympy.expand(expr)
    # a symbolic bound (a size symbol) proves nothing here: only numbers take part
    key = tuple(sorted(((s, int(b)) for s, b in bounds.items() if s in expr.free_symbols and (isinstance(b, int) or b.is_Integer)),
                       key=lambda p: p[0].name))
    return _simplify_cached(expr, key)
