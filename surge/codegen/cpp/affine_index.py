"""Replace floor-division/modulo index expressions by the affine forms they equal on the loop domain.

Views of views (``y.transpose(1, 2).contiguous().view(B, T, C)`` read back
through a reshape) reach the kernels as indices such as
``131072*(L // 131072) + L % 1024 + 1024*((L // 1024) % 128)`` with
``L = 1024*x0 + x1``: on the loop's domain that is just ``L``. Written as is,
the division and modulo in the innermost loop turn a contiguous vector load
into a gather and cost several times the kernel's arithmetic.

The kernels have static sizes, so the question "which affine function is this
on the whole domain" is answered exactly by evaluating the expression on every
point of the domain (as int64 tensors, for domains up to ``MAX_POINTS``). Where the
whole expression is not affine, the innermost variable alone may still enter
affinely (``f(outer, v) = f(outer, 0) + a*v``): then only the outer part keeps
its divisions, which the compiler hoists out of the vector loop.
"""
from __future__ import annotations

import math

import sympy
import torch

from ...lowering.size_vars import static_int
from ...lowering.sizes import FloorDiv, Mod

# Domains past this many points keep their expressions (the check would cost too much time).
MAX_POINTS = 1 << 21


def _integer(value: int) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.int64)


def _evaluate(expr: sympy.Expr, env: dict):
    # torch's ``//`` and ``%`` on integer tensors round toward minus infinity, as
    # sympy's FloorDiv and Mod do.
    if expr.is_Integer:
        return _integer(int(expr))
    if expr.is_Symbol:
        return env[expr]
    if isinstance(expr, FloorDiv):
        return _evaluate(expr.args[0], env) // _evaluate(expr.args[1], env)
    if isinstance(expr, Mod):
        return _evaluate(expr.args[0], env) % _evaluate(expr.args[1], env)
    if expr.is_Add:
        out = _integer(0)
        for a in expr.args:
            out = out + _evaluate(a, env)
        return out
    if expr.is_Mul:
        out = _integer(1)
        for a in expr.args:
            out = out * _evaluate(a, env)
        return out
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        return _evaluate(expr.base, env) ** int(expr.exp)
    raise NotImplementedError(f"cannot evaluate index expression {expr}")


def affine_index(expr: sympy.Expr, sizes: dict, innermost: str | None) -> sympy.Expr:
    """``expr`` as an affine function of the loop variables where it is one on their domain
    (``sizes``: symbol name -> static loop size), else with ``innermost`` split off affinely
    where possible, else unchanged."""
    if not expr.atoms(FloorDiv, Mod):
        return expr
    symbols = sorted(expr.free_symbols, key=lambda s: s.name)
    if not symbols or any(s.name not in sizes for s in symbols):
        return expr
    shape = tuple(static_int(sizes[s.name]) for s in symbols)
    if 0 in shape or math.prod(shape) > MAX_POINTS:
        return expr
    env = {}
    for axis, s in enumerate(symbols):
        view = [1] * len(symbols)
        view[axis] = shape[axis]
        env[s] = torch.arange(shape[axis], dtype=torch.int64).reshape(view)
    try:
        values = _evaluate(expr, env).expand(shape)
    except (NotImplementedError, ZeroDivisionError, RuntimeError):  # torch raises RuntimeError on x // 0
        return expr
    origin = (0,) * len(symbols)
    base = int(values[origin].item())
    coefficients = []
    for axis in range(len(symbols)):
        unit = list(origin)
        unit[axis] = 1 if shape[axis] > 1 else 0
        coefficients.append(int(values[tuple(unit)].item()) - base)
    affine = _integer(base)
    for axis, s in enumerate(symbols):
        affine = affine + coefficients[axis] * env[s]
    if torch.equal(values, affine.expand(shape)):
        return sympy.Integer(base) + sum((c * s for c, s in zip(coefficients, symbols)), sympy.Integer(0))
    names = [s.name for s in symbols]
    if innermost not in names:
        return expr
    axis = names.index(innermost)
    inner = symbols[axis]
    first = values.narrow(axis, 0, 1)
    if torch.equal(values - first, (coefficients[axis] * env[inner]).expand(shape)):
        return expr.xreplace({inner: sympy.Integer(0)}) + coefficients[axis] * inner
    return expr


def symbolic_affine_index(expr: sympy.Expr, loop_sizes: dict, sizes) -> sympy.Expr:
    """``expr`` with each floor division and modulo that is exact on the loop domain for
    every size in range rewritten: ``(q*d + r) // d`` is ``q`` and ``(q*d + r) % d`` is ``r``
    when ``0 <= r < d`` on the whole domain, which ``sizes`` (a ``SizeVars``) decides from
    the loop variables' bounds (``loop_sizes``: name -> symbolic size) without a guard.
    For kernels of symbolic sizes, where the static check above cannot evaluate points."""
    if not expr.atoms(FloorDiv, Mod):
        return expr
    return _rewrite(expr, loop_sizes, sizes)


def _rewrite(expr, loop_sizes, sizes):
    if expr.is_Atom:
        return expr
    args = [_rewrite(a, loop_sizes, sizes) for a in expr.args]
    if isinstance(expr, (FloorDiv, Mod)):
        split = _split(args[0], args[1], loop_sizes, sizes)
        if split is not None:
            return split[0] if isinstance(expr, FloorDiv) else split[1]
        return type(expr)(*args)
    return expr.func(*args)


def _split(a, d, loop_sizes, sizes):
    """(q, r) with ``a == q*d + r`` and ``0 <= r < d`` on the loop domain, or None."""
    quotient, rest = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(a)):
        q = sympy.expand(term / d)
        coeff, _ = q.as_coeff_Mul()
        if coeff.is_Integer and not any(f.is_Pow and f.exp < 0 for f in sympy.Mul.make_args(q)) \
                and not q.has(FloorDiv, Mod):
            quotient += q
        else:
            rest += term
    if rest.has(FloorDiv, Mod):
        return None
    highest = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(rest)):
        coeff, _ = term.as_coeff_Mul()
        if not coeff.is_Integer or coeff < 0:
            return None   # r is not known to be >= 0 on the domain
        # a monomial with a non-negative coefficient is largest at each variable's largest value
        highest += term.xreplace({s: loop_sizes[s.name] - 1 for s in term.free_symbols if s.name in loop_sizes})
    if any(s.name in loop_sizes for s in highest.free_symbols):
        return None
    if not (d.is_positive or sizes.known_leq(1, d)) or not sizes.known_leq(highest + 1, d):
        return None
    return quotient, rest
