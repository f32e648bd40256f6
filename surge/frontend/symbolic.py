"""Symbolic size expressions: polynomials over size symbols, in one normal form.

A size the frontend does not specialize is a symbol (``s0``); what the program
computes from sizes is an ``Expr``: a sum of integer (or float) multiples of
monomials, each a product of *atoms* raised to powers. An atom is a symbol or an
opaque function of expressions (``floordiv``, ``mod``, ``max``, ``min``,
``truediv``). Every expression is built in normal form (terms sorted, like terms
merged, zero terms dropped), so two expressions are equal exactly when their
polynomials are: ``s0*s1*768 == s0*s1*12*64`` is decided without a guard, and so
is ``(4*s0) // 4 == s0``.

A condition on sizes is a ``Rel``: ``expr op 0`` with ``op`` one of ``==``,
``!=``, ``<``, ``<=`` (the other comparisons are rewritten to these).

Expressions render as Python source (``render``), evaluate on concrete values
(``evaluate``) and have a value range over the symbols' ranges
(``value_range``); ``shape_env.py`` builds on these.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

INF = math.inf


@dataclass(frozen=True)
class Symbol:
    """A size or Python number the graph is compiled for symbolically."""
    name: str
    is_float: bool = False

    def sort_key(self):
        return (0, len(self.name), self.name)

    def render(self, names) -> str:
        return names(self)


@dataclass(frozen=True)
class Fn:
    """An opaque function of expressions: floordiv, mod, max, min, truediv."""
    op: str
    args: tuple

    def sort_key(self):
        return (1, self.op, tuple(a.sort_key() for a in self.args))

    def render(self, names) -> str:
        if self.op in UNARY_FUNCTIONS:
            return f"math.{self.op}({self.args[0].render(names)})"
        a, b = (x.render(names) for x in self.args)
        if self.op in ("max", "min"):
            return f"{self.op}({a}, {b})"
        return f"({a} {_FN_SYMBOLS[self.op]} {b})"


_FN_SYMBOLS = {"floordiv": "//", "mod": "%", "truediv": "/", "pow": "**"}
# Functions of one float that torch.SymFloat carries (torch._sym_sqrt, ...): a number
# computed with them (``math.sqrt(lr)``) stays symbolic.
MATH_FUNCTIONS = ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos", "atan", "log2")
# Float -> int functions (``math.floor``, ``int()``'s truncation): a symbolic int.
ROUNDING_FUNCTIONS = ("floor", "ceil", "trunc")
UNARY_FUNCTIONS = MATH_FUNCTIONS + ROUNDING_FUNCTIONS
_FN_EVAL = {"floordiv": operator.floordiv, "mod": operator.mod, "truediv": operator.truediv, "pow": operator.pow,
            "max": max, "min": min, **{name: getattr(math, name) for name in UNARY_FUNCTIONS}}


# Memo of arithmetic on expressions. A result is a pure function of its operands (no
# shape environment, no facts), and a capture asks the same few hundred sums, products
# and comparisons tens of thousands of times: torch's meta kernels recompute broadcasting,
# contiguity and view shapes per op. Keyed by the operation's name and the operands'
# identity, not equality: ``Expr`` equality ignores the coefficients' types
# (``s0 + 1 == s0 + 1.0``), which a result keeps. Each entry holds its operands, so their
# ids are not reused while it lives; results are the same objects every time, so identity
# keys keep hitting downstream. Interned constants (keyed with their type: 1, 1.0 and True
# are three) and symbol atoms are the roots those expressions grow from.
_MEMO: dict = {}
_CONSTS: dict = {}
_ATOMS: dict = {}
_MEMO_LIMIT = 20_000   # about 1,300 for a 2-layer GPT


def _remember(key, value, *operands):
    if len(_MEMO) >= _MEMO_LIMIT:   # emptied when full: results stay valid, only sharing ends
        _MEMO.clear()
        _CONSTS.clear()
        _ATOMS.clear()
    _MEMO[key] = (value, operands)
    return value


class Expr:
    """A polynomial in atoms: ``terms`` is a sorted tuple of (monomial, coefficient),
    a monomial a sorted tuple of (atom, power); the constant term's monomial is ``()``.
    Immutable: built once, in normal form; the memoized queries below rely on that."""

    __slots__ = ("terms", "_hash", "_atoms", "_symbols")

    def __init__(self, terms):
        merged: dict = {}
        for mono, coeff in terms:
            merged[mono] = merged.get(mono, 0) + coeff
        items = [(m, c) for m, c in merged.items() if c != 0]
        if len(items) > 1:
            items.sort(key=lambda mc: _mono_key(mc[0]))
        self.terms = tuple(items)
        self._hash = hash(self.terms)
        self._atoms = None
        self._symbols = None

    # ---- construction ------------------------------------------------------
    @staticmethod
    def const(value) -> "Expr":
        key = (type(value), value)
        found = _CONSTS.get(key)
        if found is None:
            found = Expr([((), value)])
            if value == value:   # not NaN: a NaN key never matches itself
                _CONSTS[key] = found
        return found

    @staticmethod
    def atom(atom) -> "Expr":
        if not isinstance(atom, Symbol):   # a function atom's equality is its arguments' (types ignored)
            return Expr([(((atom, 1),), 1)])
        found = _ATOMS.get(atom)
        if found is None:
            found = _ATOMS[atom] = Expr([(((atom, 1),), 1)])
        return found

    @staticmethod
    def of(value) -> "Expr":
        return value if isinstance(value, Expr) else Expr.const(value)

    # ---- queries ---------------------------------------------------------------
    def constant(self):
        """The value if the expression is a number, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    def single_atom(self):
        """The atom if the expression is exactly one atom (coefficient 1), else None."""
        if len(self.terms) == 1:
            mono, coeff = self.terms[0]
            if coeff == 1 and len(mono) == 1 and mono[0][1] == 1:
                return mono[0][0]
        return None

    def atoms(self) -> frozenset:
        if self._atoms is None:
            found = set()
            for mono, _ in self.terms:
                for atom, _ in mono:
                    found.add(atom)
                    if isinstance(atom, Fn):
                        for a in atom.args:
                            found |= a.atoms()
            self._atoms = frozenset(found)
        return self._atoms

    def symbols(self) -> frozenset:
        if self._symbols is None:
            self._symbols = frozenset(a for a in self.atoms() if isinstance(a, Symbol))
        return self._symbols

    @property
    def free_symbols(self) -> set:
        """The symbols as sympy names, for torch's helpers that read ``node.expr.free_symbols``
        (``free_unbacked_symbols`` in meta kernels, which tells symbols apart by name).
        Only ever asked after torch imported sympy itself."""
        return _sympy_names(self.symbols())

    def sort_key(self):
        return tuple((_mono_key(m), c) for m, c in self.terms)

    def __eq__(self, other):
        return self is other or (isinstance(other, Expr) and self.terms == other.terms)

    def __hash__(self):
        return self._hash

    # ---- arithmetic (normal form is kept by the constructor; memoized, see _MEMO) --
    def __add__(self, other):
        other = Expr.of(other)
        found = _MEMO.get(("+", id(self), id(other)))
        if found is not None:
            return found[0]
        return _remember(("+", id(self), id(other)), Expr(self.terms + other.terms), self, other)

    def __neg__(self):
        found = _MEMO.get(("neg", id(self)))
        if found is not None:
            return found[0]
        return _remember(("neg", id(self)), Expr([(m, -c) for m, c in self.terms]), self)

    def __sub__(self, other):
        other = Expr.of(other)
        found = _MEMO.get(("-", id(self), id(other)))
        if found is not None:
            return found[0]
        return _remember(("-", id(self), id(other)), self + (-other), self, other)

    def __mul__(self, other):
        other = Expr.of(other)
        found = _MEMO.get(("*", id(self), id(other)))
        if found is not None:
            return found[0]
        product = Expr([(_mono_mul(m1, m2), c1 * c2) for m1, c1 in self.terms for m2, c2 in other.terms])
        return _remember(("*", id(self), id(other)), product, self, other)

    def pow(self, n: int) -> "Expr":
        result = Expr.const(1)
        for _ in range(n):
            result = result * self
        return result

    def exact_quotient(self, other: "Expr"):
        """``self / other`` when ``other`` is one term dividing every term exactly, else None."""
        if len(other.terms) != 1:
            return None
        dmono, dcoeff = other.terms[0]
        out = []
        for mono, coeff in self.terms:
            q = _mono_div(mono, dmono)
            if q is None or isinstance(coeff, float) or isinstance(dcoeff, float) or coeff % dcoeff:
                return None
            out.append((q, coeff // dcoeff))
        return Expr(out)

    # ---- evaluation and printing ---------------------------------------------
    def evaluate(self, values) -> int | float:
        """The value with ``values(symbol)`` for each symbol."""
        total = 0
        for mono, coeff in self.terms:
            term = coeff
            for atom, power in mono:
                term = term * evaluate_atom(atom, values) ** power
            total = total + term
        return total

    def render(self, names) -> str:
        """Python source; ``names(symbol)`` is the text standing for a symbol."""
        if not self.terms:
            return "0"
        parts = []
        for mono, coeff in self.terms:
            factors = [a.render(names) if p == 1 else f"{a.render(names)}**{p}" for a, p in mono]
            if not factors:
                parts.append(repr(coeff))
            elif coeff == 1:
                parts.append("*".join(factors))
            elif coeff == -1:
                parts.append("-" + "*".join(factors))
            else:
                parts.append(f"{coeff!r}*" + "*".join(factors))
        text = " + ".join(parts).replace("+ -", "- ")
        return text if len(parts) == 1 and "*" not in text and not text.startswith("-") else f"({text})"

    def __repr__(self):
        return self.render(lambda s: s.name)

    def substitute(self, mapping) -> "Expr":
        """The expression with ``mapping(atom)`` (an Expr, or None to keep it) per symbol."""
        if not mapping:
            return self
        total = Expr.const(0)
        for mono, coeff in self.terms:
            term = Expr.const(coeff)
            for atom, power in mono:
                term = term * substitute_atom(atom, mapping).pow(power)
            total = total + term
        return total


    def substitute_fns(self, rewrite) -> "Expr":
        """The expression with each function atom replaced by ``rewrite(fn)`` (an Expr)."""
        total = Expr.const(0)
        for mono, coeff in self.terms:
            term = Expr.const(coeff)
            for atom, power in mono:
                term = term * (rewrite(atom) if isinstance(atom, Fn) else Expr.atom(atom)).pow(power)
            total = total + term
        return total


def _sympy_names(symbols) -> set:
    import sympy

    return {sympy.Symbol(s.name) for s in symbols}


def _mono_key(mono):
    return tuple((a.sort_key(), p) for a, p in mono)


def _mono_mul(a, b):
    powers = dict(a)
    for atom, p in b:
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(powers.items(), key=lambda ap: ap[0].sort_key()))


def _mono_div(a, b):
    powers = dict(a)
    for atom, p in b:
        if powers.get(atom, 0) < p:
            return None
        powers[atom] -= p
    return tuple(sorted(((x, p) for x, p in powers.items() if p), key=lambda ap: ap[0].sort_key()))


def evaluate_atom(atom, values):
    if isinstance(atom, Symbol):
        return values(atom)
    return _FN_EVAL[atom.op](*(a.evaluate(values) for a in atom.args))


def substitute_atom(atom, mapping) -> Expr:
    if isinstance(atom, Symbol):
        found = mapping.get(atom)
        return Expr.atom(atom) if found is None else found
    return apply_fn(atom.op, *(a.substitute(mapping) for a in atom.args))


def apply_fn(op: str, a: Expr, b: Expr | None = None) -> Expr:
    """``op(a, b)`` (``op(a)`` for a math function) in normal form: folded when the
    arguments are numbers, simplified where exact (memoized, see _MEMO)."""
    found = _MEMO.get((op, id(a), id(b)))
    if found is not None:
        return found[0]
    return _remember((op, id(a), id(b)), _apply_fn(op, a, b), a, b)


def _apply_fn(op: str, a: Expr, b: Expr | None) -> Expr:
    if op in UNARY_FUNCTIONS:
        c = a.constant()
        return Expr.const(_FN_EVAL[op](c)) if c is not None else Expr.atom(Fn(op, (a,)))
    ca, cb = a.constant(), b.constant()
    if ca is not None and cb is not None:
        return Expr.const(_FN_EVAL[op](ca, cb))
    if op == "floordiv":
        if cb == 1:
            return a
        q = a.exact_quotient(b)
        if q is not None:
            return q
    elif op == "mod":
        if cb == 1 or a.exact_quotient(b) is not None:
            return Expr.const(0)
    elif op == "truediv" and cb is not None and cb != 0:
        return a * (1.0 / cb)
    elif op == "pow" and cb == 1:
        return a
    elif op in ("max", "min") and a == b:
        return a
    return Expr.atom(Fn(op, (a, b)))


# ---- conditions ------------------------------------------------------------------

@dataclass(frozen=True)
class Rel:
    """``expr op 0``, op in ==, !=, <, <=."""
    op: str
    expr: Expr

    def __post_init__(self):   # hashed often (memo keys, the known facts): once here
        object.__setattr__(self, "_hash", hash((self.op, self.expr)))

    def __hash__(self):
        return self._hash

    @staticmethod
    def compare(op: str, a: Expr, b: Expr) -> "Rel":
        """``a op b`` for op in ==, !=, <, <=, >, >= (memoized, see _MEMO)."""
        found = _MEMO.get((op, id(a), id(b)))
        if found is not None:
            return found[0]
        if op == ">":
            rel = Rel("<", b - a)
        elif op == ">=":
            rel = Rel("<=", b - a)
        else:
            rel = Rel(op, a - b)
        return _remember((op, id(a), id(b)), rel, a, b)

    def negate(self) -> "Rel":
        if self.op == "==":
            return Rel("!=", self.expr)
        if self.op == "!=":
            return Rel("==", self.expr)
        if self.op == "<":      # not (e < 0)  <=>  -e <= 0
            return Rel("<=", -self.expr)
        return Rel("<", -self.expr)  # not (e <= 0)  <=>  -e < 0

    def evaluate(self, values) -> bool:
        return _REL_EVAL[self.op](self.expr.evaluate(values), 0)

    def substitute(self, mapping) -> "Rel":
        return Rel(self.op, self.expr.substitute(mapping))

    def symbols(self) -> set:
        return self.expr.symbols()

    @property
    def free_symbols(self) -> set:
        return _sympy_names(self.symbols())

    def render(self, names) -> str:
        """Readable Python: the terms with a negative coefficient move to the right side."""
        left = Expr([t for t in self.expr.terms if not _negative(t[1])])
        right = -Expr([t for t in self.expr.terms if _negative(t[1])])
        return f"{_bare(left.render(names))} {self.op} {_bare(right.render(names))}"

    def __repr__(self):
        return self.render(lambda s: s.name)


def _negative(c) -> bool:
    return c < 0


def _bare(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]) else text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


_REL_EVAL = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le}


# ---- value ranges (interval arithmetic over the symbols' ranges) ----------------

def _mul_bounds(a, b):
    products = []
    for x in a:
        for y in b:
            if (x == 0 and math.isinf(y)) or (y == 0 and math.isinf(x)):
                products.append(0)
            else:
                products.append(x * y)
    return min(products), max(products)


def value_range(expr: Expr, ranges) -> tuple:
    """(low, high) of ``expr`` when each symbol lies in ``ranges(symbol)``; may be loose."""
    low, high = 0, 0
    for mono, coeff in expr.terms:
        t = (coeff, coeff)
        for atom, power in mono:
            r = atom_range(atom, ranges)
            for _ in range(power):
                t = _mul_bounds(t, r)
        low, high = low + t[0], high + t[1]
    return low, high


def atom_range(atom, ranges) -> tuple:
    if isinstance(atom, Symbol):
        return ranges(atom)
    if atom.op in ROUNDING_FUNCTIONS:   # monotonic: the ends rounded
        low, high = value_range(atom.args[0], ranges)
        rounding = getattr(math, atom.op)
        return (low if math.isinf(low) else rounding(low)), (high if math.isinf(high) else rounding(high))
    if atom.op in UNARY_FUNCTIONS:
        return (0, INF) if atom.op == "sqrt" else (-INF, INF)
    a, b = (value_range(x, ranges) for x in atom.args)
    if atom.op in ("max", "min"):
        f = max if atom.op == "max" else min
        return f(a[0], b[0]), f(a[1], b[1])
    if atom.op == "floordiv" and a[0] >= 0 and b[0] > 0:
        return (a[0] // b[1] if not math.isinf(b[1]) else 0), (a[1] // b[0] if not math.isinf(a[1]) else INF)
    if atom.op == "mod" and b[0] > 0 and a[0] >= 0:
        return 0, b[1] - 1
    return -INF, INF


def shifted_range(expr: Expr, ranges) -> tuple:
    """A bound of a polynomial in symbols with finite lower bounds: with each ``s = low + t``
    (``t >= 0``), a polynomial whose non-constant coefficients are all >= 0 is at least its
    constant term (all <= 0: at most). ``s0**2 - s0`` for ``s0 >= 2`` becomes
    ``t**2 + 3*t + 2``: at least 2, where intervals only give (-inf, inf)."""
    atoms = expr.atoms()
    if not all(isinstance(a, Symbol) and ranges(a)[0] != -INF for a in atoms):
        return -INF, INF
    shifted = expr.substitute({a: Expr.atom(a) + ranges(a)[0] for a in atoms})
    constant = sum(c for m, c in shifted.terms if m == ())
    coefficients = [c for m, c in shifted.terms if m != ()]
    if all(c >= 0 for c in coefficients):
        return constant, INF
    if all(c <= 0 for c in coefficients):
        return -INF, constant
    return -INF, INF


def decide(rel: Rel, ranges):
    """True or False when the ranges decide ``rel``, else None."""
    c = rel.expr.constant()
    if c is not None:
        return _REL_EVAL[rel.op](c, 0)
    low, high = value_range(rel.expr, ranges)
    if low == -INF or high == INF:
        s_low, s_high = shifted_range(rel.expr, ranges)
        low, high = max(low, s_low), min(high, s_high)
    if rel.op == "<":
        return True if high < 0 else False if low >= 0 else None
    if rel.op == "<=":
        return True if high <= 0 else False if low > 0 else None
    if low > 0 or high < 0:
        return rel.op == "!="
    return None
