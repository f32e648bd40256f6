"""Symbolic sizes of a capture kept on disk (``disk_cache.py``).

A dynamic capture's graph holds SymInts of its ``ShapeEnv`` (placeholders, symbolic
shapes of meta tensors); its entry function checks the environment's ranges and facts
as plain Python. To store it, the environment is written as data (each symbol's name,
hint, range and why it is symbolic; the replacements and facts) and every symbolic
value as its expression's terms; a new process rebuilds one ``ShapeEnv`` per record
and SymInts on it, with the stored hints: the backend's trace then decides every size
question as it did where the capture was made, so the facts it records are the ones
the stored entry already checks. Should it record a new one anyway, the compiled graph
only runs on calls that satisfy it (``FactsCheck``); other calls run the captured
graph as it is.
"""
from __future__ import annotations

import dataclasses

import torch

from .shape_env import Fact, ShapeEnv, SymbolInfo
from .size_node import SizeNode, is_symbolic
from .symbolic import Expr, Fn, Rel, Symbol


@dataclasses.dataclass(frozen=True)
class NamedSource:
    """A stored symbol's source, by the name the capture gave it (for logs)."""
    text: str

    def name(self) -> str:
        return self.text


@dataclasses.dataclass(frozen=True)
class StoredValue:
    """A symbolic int or float: its expression as terms, and its Python type."""
    terms: tuple
    pytype: type


def encode_expr(expr: Expr) -> tuple:
    """An expression as nested tuples (an ``Expr``'s cached hash is per process)."""
    return tuple((tuple((_encode_atom(a), p) for a, p in mono), c) for mono, c in expr.terms)


def _encode_atom(atom):
    if isinstance(atom, Symbol):
        return ("sym", atom.name, atom.is_float)
    return ("fn", atom.op, tuple(encode_expr(a) for a in atom.args))


def decode_expr(terms: tuple) -> Expr:
    return Expr([(tuple((_decode_atom(a), p) for a, p in mono), c) for mono, c in terms])


def _decode_atom(atom):
    if atom[0] == "sym":
        return Symbol(atom[1], atom[2])
    return Fn(atom[1], tuple(decode_expr(a) for a in atom[2]))


def encode_env(env: ShapeEnv) -> dict:
    return {
        "symbols": [(s.name, s.is_float, i.hint, i.low, i.high, i.reason, i.is_size, i.source.name())
                    for s, i in env.symbols.items()],
        "replacements": [(s.name, s.is_float, encode_expr(e)) for s, e in env.replacements.items()],
        "facts": [(f.rel.op, encode_expr(f.rel.expr), f.why) for f in env.facts],
    }


def decode_env(data: dict) -> ShapeEnv:
    """A shape environment with the stored symbols, their SymInts, replacements and facts."""
    env = ShapeEnv()
    for name, is_float, hint, low, high, reason, is_size, source in data["symbols"]:
        symbol = Symbol(name, is_float)
        env.symbols[symbol] = SymbolInfo(symbol, NamedSource(source), hint, low, high, reason, is_size)
        node = SizeNode(env, Expr.atom(symbol), float if is_float else int, hint)
        env._symints[symbol] = torch.SymFloat(node) if is_float else torch.SymInt(node)
    for name, is_float, terms in data["replacements"]:
        env.replacements[Symbol(name, is_float)] = decode_expr(terms)
    for op, terms, why in data["facts"]:
        rel = Rel(op, decode_expr(terms))
        env.facts.append(Fact(rel, why))
        env._known.add(rel)
    return env


def encode_value(value):
    """A surge SymInt / SymFloat as ``StoredValue``; anything else as it is."""
    if is_symbolic(value) and isinstance(value.node.expr, Expr):
        return StoredValue(encode_expr(value.node.expr), value.node.pytype)
    return value


def decode_value(value, env: ShapeEnv | None):
    if not isinstance(value, StoredValue):
        return value
    expr = decode_expr(value.terms)
    atom = expr.single_atom()
    if isinstance(atom, Symbol) and atom in env._symints:
        return env.value_of(atom)
    node = SizeNode(env, expr, value.pytype, expr.evaluate(env.hint))
    return torch.SymFloat(node) if value.pytype is float else torch.SymInt(node)


class FactsCheck:
    """The facts (and narrowed ranges) a backend's trace added to a restored environment,
    checked on each call from the graph's size arguments: a call they do not hold for runs
    ``fallback`` (the captured graph as it is), every other call the compiled graph."""

    def __init__(self, env: ShapeEnv, before: tuple, gm: torch.fx.GraphModule, compiled, fallback):
        facts_before, ranges_before = before
        self.compiled, self.fallback = compiled, fallback
        positions = {}
        for i, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
            val = node.meta.get("val")
            if is_symbolic(val) and isinstance(val.node.expr, Expr) and val.node.expr.single_atom() is not None:
                positions.setdefault(val.node.expr.single_atom(), i)
        self.rels = [f.rel for f in env.facts[facts_before:]]
        for symbol, info in env.symbols.items():
            low, high = ranges_before[symbol]
            if info.low > low:
                self.rels.append(Rel("<=", Expr.const(info.low) - Expr.atom(symbol)))
            if info.high < high:
                self.rels.append(Rel("<=", Expr.atom(symbol) - Expr.const(info.high)))
        self.positions = positions
        self.checkable = all(r.symbols() <= set(positions) for r in self.rels)

    @staticmethod
    def state(env: ShapeEnv) -> tuple:
        return len(env.facts), {s: (i.low, i.high) for s, i in env.symbols.items()}

    def __call__(self, *args):
        positions = self.positions
        if self.checkable and all(r.evaluate(lambda s: args[positions[s]]) for r in self.rels):
            return self.compiled(*args)
        return self.fallback(*args)
