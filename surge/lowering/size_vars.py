"""SizeVars: what the compiler knows about a graph's symbolic sizes, and the one place
that turns a size into a number.

Sizes and strides are sympy expressions from lowering to the generated code. A graph
with dynamic dimensions has size symbols (``s0, s1, ...``): they come from its SymInt
placeholders and from the symbolic shapes of its inputs' metadata, as the frontend (or
Dynamo) hands them over. One ``SizeVars`` object per graph is made by lowering, kept on
the ``LoopGraph`` and passed explicitly to whatever needs a fact about sizes:

- ``hint(expr)``: the value at the example inputs. Heuristics (block sizes, whether to
  split a reduction, persistent or looped reductions, fusion's parallelism rule) read
  hints through ``size_hint``; a choice made from a hint must either be valid for every
  size in range (masked blocks) or be guarded.
- ``known_equal`` / ``known_leq`` / ``known_divisible``: facts that hold for every value
  of the symbols in range (each symbol >= its lower bound, 2 unless stated: 0 and 1 stay
  specialized, as torch.compile does). They never guard.
- ``guard_equal`` / ``guard_leq`` / ``guard_divisible``: the answer at the hints, recorded
  as a guard (``guards``) that the caller must keep: the host code checks every guard on
  each call and refuses sizes that break one (``SizeGuardFailed``).
- ``static(expr)``: the integer a size is, or None for a symbolic one.

No other module calls ``int()`` on a size.
"""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import sympy
import torch

from ..errors import SizeGuardFailed
from ..frontend.size_node import SizeNode
from ..frontend.symbolic import Symbol as FrontendSymbol
from .sizes import FloorDiv, Mod

# 0 and 1 are specialized (a size-1 dim broadcasts): a symbol is at least this.
DEFAULT_LOWER_BOUND = 2
# floor / ceil of a size over a divisor up to this have an integer form (a float's exact
# fraction has a power-of-two denominator: 1/3 as a float is not a third)
MAX_ROUNDING_DIVISOR = 1 << 16


@dataclasses.dataclass(frozen=True)
class Guard:
    """``expr`` holds: ``kind`` is "eq" (== 0), "ne" (!= 0), "ge" (>= 0), "lt" (< 0) or
    "divisible" (``expr % divisor == 0``), "indivisible"."""
    kind: str
    expr: sympy.Expr
    divisor: sympy.Expr = sympy.Integer(1)

    def holds(self, values: dict) -> bool:
        v = _evaluate(self.expr, values)
        d = _evaluate(self.divisor, values)
        return {"eq": v == 0, "ne": v != 0, "ge": v >= 0, "lt": v < 0,
                "divisible": v % d == 0, "indivisible": v % d != 0}[self.kind]

    def __str__(self) -> str:
        if self.kind in ("divisible", "indivisible"):
            op = "==" if self.kind == "divisible" else "!="
            return f"{self.expr} % {self.divisor} {op} 0"
        return f"{self.expr} {dict(eq='==', ne='!=', ge='>=', lt='<')[self.kind]} 0"


def is_symbolic_size(value) -> bool:
    """A SymInt (of the frontend's or torch's shape environment) rather than a number."""
    return not isinstance(value, (int, bool)) and getattr(getattr(value, "node", None), "expr", None) is not None


def has_symbolic_layout(value) -> bool:
    """A traced tensor (a meta value) whose sizes or strides are symbolic."""
    return isinstance(value, torch.Tensor) and any(is_symbolic_size(v) for v in (*value.shape, *value.stride()))


def symbolic_form(node, example):
    """What the compiler reads of a graph input's sizes: a SymInt placeholder's traced
    SymInt where the call handed its value (the frontend and aot pass the call's real
    inputs as examples, the symbols live on the graph's placeholders), else ``example``.
    A tensor example keeps its dtype and device; ``has_symbolic_layout`` of the node's
    traced value says whether its sizes are to be read there instead."""
    traced = node.meta.get("val") if node.op == "placeholder" else None
    if isinstance(example, int) and not isinstance(example, bool) and is_symbolic_size(traced):
        return traced
    return example


def static_int(expr) -> int | None:
    """The number a size expression is (None when it has size symbols): code that has
    checked a size is static turns it into an int here."""
    if isinstance(expr, int):
        return expr
    return int(expr) if expr.is_Integer else None


def _evaluate(expr: sympy.Expr, values: dict) -> int:
    """The integer ``expr`` takes with ``values`` (symbol -> int) for its symbols."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return values[expr]
    args = [_evaluate(a, values) for a in expr.args]
    if isinstance(expr, FloorDiv):
        return args[0] // args[1]
    if isinstance(expr, Mod):
        return args[0] % args[1]
    if expr.is_Add:
        return sum(args)
    if expr.is_Mul:
        out = 1
        for a in args:
            out *= a
        return out
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) >= 0:
        return args[0] ** args[1]
    if isinstance(expr, (sympy.Max, sympy.Min)):
        return max(args) if isinstance(expr, sympy.Max) else min(args)
    raise NotImplementedError(f"cannot evaluate the size {expr}")


class SizeVars:
    """The size symbols of one graph: hints, ranges, known facts and recorded guards."""

    def __init__(self):
        self.hints: dict = {}       # symbol -> example value
        self.lower: dict = {}       # symbol -> smallest value
        self.upper: dict = {}       # symbol -> largest value (absent: unbounded)
        self.guards: list = []      # Guard, in the order recorded
        self._imported: dict = {}   # a foreign (torch's or the frontend's) symbol -> ours
        self._keep_alive: list = []  # the frontend shape environments whose symbols were imported

    # -- symbols ---------------------------------------------------------------------
    @property
    def symbols(self) -> list:
        """The size symbols, in the order they were made (``s0, s1, ...``)."""
        return list(self.hints)

    def new_symbol(self, hint: int, lower: int = DEFAULT_LOWER_BOUND, upper: int | None = None) -> sympy.Symbol:
        symbol = sympy.Symbol(f"s{len(self.hints)}", integer=True, positive=True)
        self.hints[symbol] = int(hint)
        self.lower[symbol] = lower
        if upper is not None:
            self.upper[symbol] = upper
        return symbol

    def set_hint(self, expr, value) -> None:
        """The example value of a size that is one symbol, from a concrete input of the call
        being compiled (it overrides the shape environment's example: a graph compiled again
        for a call whose sizes broke a guard decides from that call's sizes)."""
        if isinstance(expr, sympy.Symbol) and expr in self.hints and isinstance(value, int):
            self.hints[expr] = value

    def expr(self, value) -> sympy.Expr:
        """A size as our expression: an int, one of our expressions, or a SymInt-like value
        (``value.node.expr`` over its shape environment's symbols, whose hints and ranges
        are read from it)."""
        if isinstance(value, sympy.Basic):
            return value
        if isinstance(value, bool):
            raise TypeError(f"a bool is not a size: {value!r}")
        if isinstance(value, int):
            return sympy.Integer(value)
        node = getattr(value, "node", None)
        if isinstance(node, SizeNode):   # the frontend's own shape environment
            return self._import_frontend(node)
        foreign = getattr(node, "expr", None)
        if foreign is None:
            if hasattr(value, "__index__"):
                return sympy.Integer(value.__index__())
            raise TypeError(f"not a size: {type(value).__name__} {value!r}")
        return self._import(sympy.sympify(foreign), node)

    def shape(self, values) -> tuple:
        """A shape or strides (ints, SymInts or expressions) as a tuple of our expressions."""
        return tuple(self.expr(v) for v in values)

    def _import(self, foreign: sympy.Expr, node) -> sympy.Expr:
        mapping = {}
        for s in sorted(foreign.free_symbols, key=lambda s: s.name):
            if s not in self._imported:
                hint, lower, upper = _foreign_facts(s, node)
                self._imported[s] = self.new_symbol(hint, lower, upper)
            mapping[s] = self._imported[s]
        return _translate(foreign, mapping)

    def _import_frontend(self, node) -> sympy.Expr:
        """A frontend expression (``frontend/symbolic.py``'s normal form, after the facts
        its shape environment recorded) over our symbols: each frontend symbol becomes one
        of ours with its hint and range."""
        if node.pytype is not int:
            raise TypeError(f"a {node.pytype.__name__} is not a size: {node.expr!r}")
        env = node.env
        return self._frontend_expr(env.simplify(node.expr), env)

    def _frontend_expr(self, expr, env, scale: int = 1) -> sympy.Expr:
        """``expr * scale`` as our expression; every coefficient must become an integer."""
        total = sympy.Integer(0)
        for mono, coeff in expr.terms:
            scaled = Fraction(coeff) * scale
            if scaled.denominator != 1:
                raise TypeError(f"the size {expr!r} has a non-integer coefficient")
            term = sympy.Integer(scaled.numerator)
            for atom, power in mono:
                term = term * self._frontend_atom(atom, env) ** power
            total = total + term
        return total

    def _frontend_atom(self, atom, env) -> sympy.Expr:
        if isinstance(atom, FrontendSymbol):
            key = (id(env), atom)
            found = self._imported.get(key)
            if found is None:
                if atom.is_float:
                    raise TypeError(f"the float {atom.name} is not a size")
                low, high = env.range(atom)
                # a number's range may be unbounded below: a bound far below every size
                lower = int(low) if math.isfinite(low) else -(2 ** 62)
                upper = int(high) if math.isfinite(high) else None
                found = self._imported[key] = self.new_symbol(env.hint(atom), lower, upper)
                self._keep_alive.append(env)   # the id in the key stays this env's
            return found
        if atom.op in ("floor", "ceil"):
            return self._rounded(atom, env)
        a, b = (self._frontend_expr(x, env) for x in atom.args)
        if atom.op == "floordiv":
            return FloorDiv(a, b)
        if atom.op == "mod":
            return Mod(a, b)
        if atom.op in ("max", "min"):
            return (sympy.Max if atom.op == "max" else sympy.Min)(a, b)
        raise TypeError(f"the size function {atom.op} has no integer form")

    def _rounded(self, atom, env) -> sympy.Expr:
        """``floor`` / ``ceil`` of a size divided by a whole number: a meta kernel's padding
        (memory-efficient attention's logsumexp has ``ceil(q_len / 32) * 32`` rows) is
        ``math.ceil(s / 32)``, which the frontend holds as ``ceil(0.03125 * s)``."""
        arg, = atom.args
        divisor = math.lcm(*(Fraction(c).denominator for _, c in arg.terms))
        if divisor > MAX_ROUNDING_DIVISOR:   # not a whole number's reciprocal: a float size
            raise TypeError(f"the size {atom.op}({arg!r}) has no integer form")
        numerator = self._frontend_expr(arg, env, scale=divisor)
        if atom.op == "ceil":
            numerator = numerator + divisor - 1
        return FloorDiv(numerator, sympy.Integer(divisor))

    # -- numbers -----------------------------------------------------------------------
    def static(self, expr) -> int | None:
        """The integer ``expr`` is, or None when it depends on a size symbol."""
        return static_int(self.expr(expr))

    def is_static(self, expr) -> bool:
        return self.expr(expr).is_Integer

    def hint(self, expr) -> int:
        """``expr``'s value at the example inputs."""
        expr = self.expr(expr)
        if expr.is_Integer:
            return int(expr)
        return _evaluate(expr, self.hints)

    def size_hint(self, expr) -> int:
        """The number a heuristic uses for ``expr`` (its hint): the decision it makes must
        be valid for every size, or guarded."""
        return self.hint(expr)

    def evaluate(self, expr, values: dict) -> int:
        """``expr`` at ``values`` (symbol or symbol name -> int)."""
        by_symbol = {s: values[s] if s in values else values[s.name] for s in self.expr(expr).free_symbols}
        return _evaluate(self.expr(expr), by_symbol)

    # -- facts for every size in range ---------------------------------------------------
    def simplify(self, expr) -> sympy.Expr:
        expr = self.expr(expr)
        return expr if expr.is_Atom else sympy.expand(expr)

    def known_equal(self, a, b) -> bool:
        a, b = self.expr(a), self.expr(b)
        if a == b:
            return True
        if a.is_Integer and b.is_Integer:   # two numbers (the common case): no expansion
            return False
        return sympy.expand(a - b) == 0

    def known_leq(self, a, b) -> bool:
        """``a <= b`` for every size in range: ``b - a``, with each symbol written as its
        lower bound plus a non-negative part, is a polynomial with non-negative coefficients
        (a constant difference is simply compared)."""
        a, b = self.expr(a), self.expr(b)
        if a.is_Integer and b.is_Integer:
            return int(a) <= int(b)
        diff = sympy.expand(b - a)
        if diff.is_Integer:
            return int(diff) >= 0
        if diff.has(FloorDiv, Mod):
            return False
        shifted = {s: s + self.lower.get(s, DEFAULT_LOWER_BOUND) for s in diff.free_symbols}
        poly = sympy.expand(diff.xreplace(shifted))
        if not poly.free_symbols:
            return int(poly) >= 0
        try:
            coeffs = sympy.Poly(poly, *sorted(poly.free_symbols, key=lambda s: s.name)).coeffs()
        except sympy.PolynomialError:   # not a polynomial (Max, Min): nothing known
            return False
        return all(c.is_Integer and c >= 0 for c in coeffs)

    def known_dense(self, shape, stride) -> bool:
        """Non-overlapping and dense for every size in range (an offset aside): the
        innermost dim has stride 1, the next the product of the sizes inside it, and so
        on (dims of size 1 take any stride)."""
        dims = [(st, sz) for st, sz in zip(stride, shape) if sz != 1]
        expected = sympy.Integer(1)
        while dims:
            found = next((d for d in dims if self.known_equal(d[0], expected)), None)
            if found is None:
                return False
            dims.remove(found)
            expected = expected * found[1]
        return True

    def known_lt(self, a, b) -> bool:
        return self.known_leq(self.expr(a) + 1, b)

    def known_divisible(self, a, d) -> bool:
        """``a % d == 0`` for every size: each term of ``a`` is a multiple of ``d`` (``d``
        an integer, or a symbolic factor of every term)."""
        a, d = sympy.expand(self.expr(a)), self.expr(d)
        if a == 0:
            return True
        if d.is_Integer:
            k = int(d)
            return all(t.as_coeff_Mul()[0].is_Integer and int(t.as_coeff_Mul()[0]) % k == 0
                       for t in sympy.Add.make_args(a))
        quotient = sympy.expand(a / d)
        return all(t.as_coeff_Mul()[0].is_Integer and not any(e.is_Pow and e.exp < 0 for e in sympy.Mul.make_args(t))
                   for t in sympy.Add.make_args(quotient))

    # -- decisions that guard ----------------------------------------------------------
    def _record(self, guard: Guard) -> None:
        if not guard.expr.free_symbols or guard in self.guards:
            return
        if guard.kind == "ge":   # e >= 0 follows from e' >= 0 when e' <= e for every size
            if any(g.kind == "ge" and self.known_leq(g.expr, guard.expr) for g in self.guards):
                return
            self.guards = [g for g in self.guards if not (g.kind == "ge" and self.known_leq(guard.expr, g.expr))]
        self.guards.append(guard)

    def guard_equal(self, a, b) -> bool:
        """Whether ``a == b`` at the hints; the answer is guarded unless it always holds."""
        a, b = self.expr(a), self.expr(b)
        if self.known_equal(a, b):
            return True
        equal = self.hint(a) == self.hint(b)
        self._record(Guard("eq" if equal else "ne", sympy.expand(a - b)))
        return equal

    def guard_leq(self, a, b) -> bool:
        """Whether ``a <= b`` at the hints; the answer is guarded unless it always holds."""
        a, b = self.expr(a), self.expr(b)
        if self.known_leq(a, b):
            return True
        if self.known_lt(b, a):
            return False
        holds = self.hint(a) <= self.hint(b)
        self._record(Guard("ge", sympy.expand(b - a)) if holds else Guard("lt", sympy.expand(b - a)))
        return holds

    def guard_lt(self, a, b) -> bool:
        return self.guard_leq(self.expr(a) + 1, b)

    def guard_divisible(self, a, d) -> bool:
        """Whether ``d`` divides ``a`` at the hints; guarded unless it always does."""
        a, d = self.expr(a), self.expr(d)
        if self.known_divisible(a, d):
            return True
        holds = self.hint(a) % self.hint(d) == 0
        self._record(Guard("divisible" if holds else "indivisible", sympy.expand(a), d))
        return holds

    def check(self, values: dict) -> None:
        """Raise ``SizeGuardFailed`` when ``values`` (symbol -> int) break a guard."""
        for g in self.guards:
            if not g.holds(values):
                raise SizeGuardFailed(f"the sizes {values} break the guard {g} this graph was compiled under")

    def describe(self) -> str:
        parts = [f"{s}: hint {self.hints[s]}, range [{self.lower[s]}, {self.upper.get(s, 'inf')}]"
                 for s in self.symbols]
        parts += [f"guard {g}" for g in self.guards]
        return "\n".join(parts)


def _foreign_facts(symbol, node) -> tuple:
    """(hint, lower bound, upper bound or None) of a shape environment's symbol."""
    env = getattr(node, "shape_env", None)
    hint = None
    for table in ("backed_var_to_val", "var_to_val"):
        values = getattr(env, table, None) if env is not None else None
        if values is not None and symbol in values:
            hint = values[symbol]
            break
    if hint is None:
        raise ValueError(f"the size symbol {symbol} has no example value")
    lower, upper = DEFAULT_LOWER_BOUND, None
    ranges = getattr(env, "var_to_range", None) if env is not None else None
    if ranges is not None and symbol in ranges:
        vr = ranges[symbol]
        if getattr(vr.lower, "is_Integer", False):
            lower = max(int(vr.lower), 0)
        if getattr(vr.upper, "is_Integer", False):
            upper = int(vr.upper)
    return int(hint), lower, upper


def _translate(expr: sympy.Expr, mapping: dict) -> sympy.Expr:
    """A shape environment's expression in our vocabulary (its symbols renamed by ``mapping``,
    its floor division and modulo as ours)."""
    if expr.is_Symbol:
        return mapping[expr]
    if expr.is_Integer:
        return expr
    args = [_translate(a, mapping) for a in expr.args]
    name = type(expr).__name__
    if name == "FloorDiv":
        return FloorDiv(*args)
    if name in ("Mod", "PythonMod"):
        return Mod(*args)
    if name == "CleanDiv":
        return FloorDiv(*args)
    if name == "ModularIndexing":   # (a // b) % c
        return Mod(FloorDiv(args[0], args[1]), args[2])
    if expr.is_Add or expr.is_Mul or expr.is_Pow or isinstance(expr, (sympy.Max, sympy.Min)):
        return expr.func(*args)
    raise NotImplementedError(f"size expression {expr} ({name}) is not supported")
