"""The shape environment: size symbols, what the graph assumes of them, and torch.SymInt.

One ``ShapeEnv`` per capture. ``size_symbol`` makes a symbol for a tensor
dimension (range ``[2, inf)`` by default: sizes 0 and 1 stay specialized, as
broadcasting and contiguity treat them apart) or for a Python number
(``number_symbol``), and returns a ``torch.SymInt`` / ``torch.SymFloat`` whose
node is a ``SizeNode``: surge's own implementation of torch's SymNode protocol.
Meta kernels run on meta tensors with such sizes, so every shape computation
(broadcasting, ``view``'s size inference, ``cat``) runs torch's own rules on
symbolic values, and each decision they make on a size (``guard_bool``,
``guard_int``) comes here: decided statically from the normal form and the
ranges when it can be (no guard), else answered from the hints (the example
values) and recorded as a *fact* the entry must check. Facts refine what is
known: ``s1 == s0`` replaces ``s1`` by ``s0`` in later expressions, ``s0 >= 16``
narrows the range, ``s0 == 8`` specializes ``s0``.

``guard_conditions`` renders the ranges and facts as Python conditions for the
entry's one check function (codegen.py). ``SizeNode`` and the helpers that read
symbolic values are in size_node.py.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from .. import logs
from .size_node import SizeNode
from .symbolic import INF, UNARY_FUNCTIONS, Expr, Fn, Rel, Symbol, apply_fn, decide, value_range


@dataclass
class SymbolInfo:
    symbol: Symbol
    source: object          # where the entry reads its value (a frontend Source)
    hint: int | float
    low: float
    high: float
    reason: str             # why it is symbolic (logged, shown by explain)
    is_size: bool = False   # a tensor's size: an int by construction (no type check)
    data_dependent: bool = False  # read back from a tensor, or a size an op computes from data
    node: object = None     # the graph node whose value it is (built on demand for a size)
    size_of: tuple = None   # (graph node of a tensor, dim): a data-dependent size's tensor


class DataDependent(BaseException):
    """A decision on a data-dependent value (one read back from a tensor) that its range
    does not settle: the graph cannot hold it. The capture starts again with such reads
    breaking the graph (capture.py). A BaseException, so that no handler of the trace
    that turns a Python error into the user's exception takes it for one."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


@dataclass
class Fact:
    rel: Rel
    why: str


class ShapeEnv:
    def __init__(self):
        self.symbols: dict[Symbol, SymbolInfo] = {}
        self.replacements: dict[Symbol, Expr] = {}
        self.facts: list[Fact] = []
        self._known: set = set()   # simplified relations known true
        self._symints: dict[Symbol, object] = {}
        # Memo of simplify and static_value, emptied when a fact is recorded; ``generation``
        # counts those changes (SizeNode.maybe_as_int keeps its answer for one generation).
        self._simplified: dict = {}
        self.generation = 0
        # The node of each arithmetic result by operation and operand expressions (torch
        # asks for the same products and sums of sizes for every tensor it makes).
        self.arith_nodes: dict = {}
        # Memo of rel_hint by the relation's identity (the value holds the relation): hints
        # never change, and a capture compares the same sizes thousands of times.
        self._rel_hints: dict = {}
        # The node of each number a SymInt meets (``wrap_int`` runs for every int operand of
        # every size computation), keyed with its type: 1, 1.0 and True are three.
        self._const_nodes: dict = {}
        # Answers of the layout predicates C++ asks of symbolic tensors (SizeNode._layout)
        self.layout_answers: dict = {}
        self._oblivious = 0
        # () -> (file, line) of the user's code being traced: named where a decision on a
        # symbol comes without a location of its own (a torch kernel asks for a number)
        self.user_location = lambda: ("", 0)

    # ---- symbols ---------------------------------------------------------------
    def size_symbol(self, source, hint: int, reason: str, low=None, high=None):
        """A SymInt for a tensor dimension of size ``hint``."""
        low = 2 if low is None else low
        high = INF if high is None else high
        return self._new(source, hint, reason, low, high, is_float=False, is_size=True)

    def number_symbol(self, source, hint, reason: str):
        is_float = isinstance(hint, float)
        return self._new(source, hint, reason, -INF, INF, is_float=is_float)

    def _new(self, source, hint, reason, low, high, *, is_float, is_size=False):
        symbol = Symbol(f"{'f' if is_float else 's'}{len(self.symbols)}", is_float)
        self.symbols[symbol] = SymbolInfo(symbol, source, hint, low, high, reason, is_size)
        logs.log("dynamic", f"{symbol.name} = {source.name()} (hint {hint!r}, range [{_bound(low)}, "
                            f"{_bound(high)}]) is symbolic: {reason}")
        node = SizeNode(self, Expr.atom(symbol), float if is_float else int, hint)
        value = torch.SymFloat(node) if is_float else torch.SymInt(node)
        self._symints[symbol] = value
        return value

    def unbacked_symbol(self, node, pytype, why: str, low=-INF, high=INF):
        """A SymInt / SymFloat for a value the graph reads from a tensor (``.item()``), made
        by ``node``: no example value and nothing the entry reads; decisions on it that the
        range does not settle raise ``DataDependent``."""
        is_float = pytype is float
        symbol = Symbol(f"{'uf' if is_float else 'u'}{len(self.symbols)}", is_float)
        self.symbols[symbol] = SymbolInfo(symbol, None, None, low, high, why, data_dependent=True, node=node)
        logs.log("dynamic", f"{symbol.name} is data-dependent: {why}")
        sym_node = SizeNode(self, Expr.atom(symbol), pytype, None)
        value = torch.SymFloat(sym_node) if is_float else torch.SymInt(sym_node)
        self._symints[symbol] = value
        return value

    def unbacked_size(self, why: str, high=INF):
        """A SymInt for a size an op computes from data (``nonzero``'s rows): in ``[0, high]``,
        its graph node (``t.size(d)``) set by ``size_node`` once the tensor has one."""
        symbol = Symbol(f"u{len(self.symbols)}")
        self.symbols[symbol] = SymbolInfo(symbol, None, None, 0, high, why, is_size=True, data_dependent=True)
        logs.log("dynamic", f"{symbol.name} is a data-dependent size in [0, {_bound(high)}]: {why}")
        value = torch.SymInt(SizeNode(self, Expr.atom(symbol), int, None))
        self._symints[symbol] = value
        return value

    def is_unbacked(self, symbol: Symbol) -> bool:
        return self.symbols[symbol].data_dependent

    @contextlib.contextmanager
    def size_oblivious(self):
        """Inside, a decision on data-dependent sizes that their ranges leave open is taken
        as for a size of at least 2 (torch's size-oblivious rule): what meta kernels ask
        (``u0 == 1`` for broadcasting and contiguity) holds for every size but 0 and 1,
        whose results agree. Decisions of the user's own code never get this."""
        self._oblivious += 1
        try:
            yield
        finally:
            self._oblivious -= 1

    @property
    def oblivious(self) -> bool:
        """Whether decisions are size-oblivious now (``size_oblivious``)."""
        return self._oblivious > 0

    def _oblivious_range(self, symbol):
        info = self.symbols[symbol]
        if info.data_dependent and (info.is_size or info.low >= 0):   # a size, or used as one
            return max(info.low, 2), max(info.high, 2)
        return info.low, info.high

    def data_dependent(self, expr) -> list:
        """The data-dependent symbols ``expr`` (an Expr or a Rel) involves."""
        expr = expr.expr if isinstance(expr, Rel) else expr
        symbols = self.symbols
        return [s for s in expr.symbols() if s in symbols and symbols[s].data_dependent]

    def refuse_data_dependent(self, rel_or_expr, why: str):
        symbols = self.data_dependent(rel_or_expr)
        reads = ", ".join(self.symbols[s].reason for s in symbols)
        raise DataDependent(f"{why.replace(' on sizes', '')} needs the value {reads}")

    def value_of(self, symbol: Symbol):
        """The SymInt / SymFloat standing for ``symbol``."""
        return self._symints[symbol]

    def hint(self, symbol: Symbol):
        return self.symbols[symbol].hint

    def range(self, symbol: Symbol) -> tuple:
        info = self.symbols[symbol]
        return info.low, info.high

    # ---- reasoning ---------------------------------------------------------------
    def simplify(self, expr: Expr) -> Expr:
        """``expr`` with the replacements made and max/min/floordiv/mod that the ranges
        decide folded (memoized until a fact changes what is known)."""
        found = self._simplified.get(expr)
        if found is not None:
            return found
        out = expr
        atoms = expr.atoms()
        if self.replacements and any(a in self.replacements for a in atoms):
            out = out.substitute(self.replacements)
        if any(isinstance(a, Fn) for a in atoms):
            out = out.substitute_fns(self._simplify_fn)
        self._simplified[expr] = out
        return out

    def _simplify_fn(self, fn: Fn):
        if fn.op in UNARY_FUNCTIONS:
            return apply_fn(fn.op, self.simplify(fn.args[0]))
        a, b = (self.simplify(x) for x in fn.args)
        if fn.op in ("max", "min"):
            low, high = value_range(a - b, self.range)
            if low >= 0:
                return a if fn.op == "max" else b
            if high <= 0:
                return b if fn.op == "max" else a
        elif fn.op in ("floordiv", "mod"):
            a_low, a_high = value_range(a, self.range)
            b_low = value_range(b, self.range)[0]
            if a_low >= 0 and b_low > 0 and value_range(b - a, self.range)[0] > 0:
                return Expr.const(0) if fn.op == "floordiv" else a  # 0 <= a < b
        return apply_fn(fn.op, a, b)

    def static_value(self, rel: Rel):
        """True/False when ``rel`` is decided without a guard, else None (inside
        ``size_oblivious``, data-dependent sizes count as at least 2 where that decides)."""
        oblivious = self._oblivious > 0
        key = ("static", rel, oblivious)
        if key in self._simplified:
            return self._simplified[key]
        rel = Rel(rel.op, self.simplify(rel.expr))
        if rel in self._known:
            value = True
        elif rel.negate() in self._known:
            value = False
        else:
            value = decide(rel, self.range)
            if value is None and oblivious and self.data_dependent(rel):
                value = decide(rel, self._oblivious_range)
        self._simplified[key] = value
        return value

    def hint_value(self, expr: Expr):
        return expr.evaluate(self.hint)

    def rel_hint(self, rel: Rel):
        """The truth of ``rel`` for the hints; None when it involves a data-dependent value."""
        found = self._rel_hints.get(id(rel))
        if found is not None:
            return found[0]
        if self.data_dependent(rel):
            value = None
        else:
            value = rel.evaluate(self.hint) if rel.symbols() else rel.evaluate(lambda s: 0)
        self._rel_hints[id(rel)] = (value, rel)
        return value

    def cost_hint(self, expr: Expr):
        """A value of ``expr`` to price work and memory by (never a decision): the hints, a
        data-dependent size counted at its bound (at most 4096), a read value as 1."""
        def value(symbol):
            info = self.symbols[symbol]
            if not info.data_dependent:
                return info.hint
            return min(info.high, 4096) if info.is_size else 1
        return expr.evaluate(value)

    def assume(self, rel: Rel, why: str) -> bool:
        """The truth of ``rel`` for the hints; recorded as a fact when not decided statically."""
        known = self.static_value(rel)
        if known is not None:
            return known
        if self.data_dependent(rel):
            self.refuse_data_dependent(rel, why)
        value = rel.evaluate(self.hint)
        fact = rel if value else rel.negate()
        self._record(Rel(fact.op, self.simplify(fact.expr)), why)
        return value

    def assume_at_run_time(self, rel: Rel) -> None:
        """``rel`` on data-dependent values, taken as known (it narrows their ranges) where
        the op that needs it checks it again when it runs; no guard can check it."""
        rel = Rel(rel.op, self.simplify(rel.expr))
        self._forget_simplified()
        self._known.add(rel)
        self._narrow_range(rel)
        logs.log("dynamic", f"assumed {rel} (checked by the op when it runs)")

    def specialize(self, expr: Expr, why: str):
        """``expr`` as a number: the hint, under the fact ``expr == hint``."""
        expr = self.simplify(expr)
        c = expr.constant()
        if c is not None:
            return c
        if self.data_dependent(expr):
            self.refuse_data_dependent(expr, why)
        value = self.hint_value(expr)
        self._record(Rel("==", expr - value), why)
        return value

    def _forget_simplified(self) -> None:
        self._simplified.clear()
        self.generation += 1

    def _record(self, rel: Rel, why: str) -> None:
        self._forget_simplified()
        self._known.add(rel)
        logs.log("dynamic", f"guard {rel} ({why})")
        if not self._narrow_range(rel):  # a range is checked as the symbol's range
            self.facts.append(Fact(rel, why))
        if rel.op != "==":
            return
        terms = rel.expr.terms
        if not all(m == () or _is_linear_symbol(m) for m, _ in terms):
            return
        linear = [(m[0][0], c) for m, c in terms if m != ()]
        constant = sum(c for m, c in terms if m == ())
        if len(linear) == 1 and abs(linear[0][1]) == 1:
            symbol, coeff = linear[0]
            self._replace(symbol, Expr.const(-constant * coeff), why)
        elif len(linear) == 2 and constant == 0 and {c for _, c in linear} == {1, -1}:
            a, b = sorted((s for s, _ in linear), key=lambda s: s.sort_key())
            self._replace(b, Expr.atom(a), why)   # the later symbol is replaced by the earlier

    def _narrow_range(self, rel: Rel) -> bool:
        """``a*s + c < 0`` (or ``<= 0``) narrows the range of ``s``; True when it did."""
        terms = rel.expr.terms
        if rel.op not in ("<", "<=") or not all(m == () or _is_linear_symbol(m) for m, _ in terms):
            return False
        linear = [(m[0][0], c) for m, c in terms if m != ()]
        if len(linear) != 1:
            return False
        constant = sum(c for m, c in terms if m == ())
        symbol, coeff = linear[0]
        info = self.symbols[symbol]
        bound = -constant / coeff
        strict = rel.op == "<"
        if symbol.is_float:
            if strict:
                return False  # a float range is closed: keep the strict fact
            if coeff > 0:
                info.high = min(info.high, bound)
            else:
                info.low = max(info.low, bound)
            return True
        if coeff > 0:   # s < bound (or <=)
            info.high = min(info.high, math.ceil(bound) - 1 if strict else math.floor(bound))
        else:           # s > bound (or >=)
            info.low = max(info.low, math.floor(bound) + 1 if strict else math.ceil(bound))
        return True

    def _replace(self, symbol: Symbol, value: Expr, why: str) -> None:
        if symbol in self.replacements:
            return
        value = self.simplify(value)
        self.replacements[symbol] = value
        for s, v in list(self.replacements.items()):
            self.replacements[s] = v.substitute({symbol: value})
        info = self.symbols[symbol]
        if value.constant() is not None:
            logs.log("dynamic", f"{symbol.name} ({info.source.name()}) specialized to {value.constant()!r}: {why}")

    # ---- rendering --------------------------------------------------------------
    def guard_conditions(self, name_of) -> list[tuple[str, str]]:
        """(Python condition, readable text) per check: each symbol's range, then the facts.
        ``name_of(symbol)`` is the entry's expression for the symbol's value."""
        checks = []
        for symbol, info in self.symbols.items():
            if info.data_dependent:   # computed by the graph, not read by the entry
                continue
            name = name_of(symbol)
            kind = "float" if symbol.is_float else "int"
            # The first check of each symbol says what it is and why it is symbolic.
            why = f" ({symbol.name}, symbolic: {info.reason})"
            if not info.is_size:
                checks.append((f"type({name}) is {kind}", f"{info.source.name()} is an {kind}{why}"))
            low, high = info.low, info.high
            if low != -INF:
                checks.append((f"{name} >= {low!r}", f"{info.source.name()} >= {low!r}{why}"))
            if high != INF:
                checks.append((f"{name} <= {high!r}", f"{info.source.name()} <= {high!r}"))
        for fact in self.facts:
            checks.append((fact.rel.render(name_of), f"{fact.rel.render(lambda s: self.symbols[s].source.name())}"
                                                     f" ({fact.why})"))
        return checks


def _is_linear_symbol(mono) -> bool:
    return len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], Symbol)


def _bound(value) -> str:
    return "inf" if value == INF else "-inf" if value == -INF else repr(value)
