"""Symbolic sizes in ATen graphs.

A torch-level graph from the frontend with symbolic sizes has SymInt
placeholders (one per symbol of its shape environment) and meta tensors with
symbolic sizes on its tensor placeholders. The aot trace keeps them: its tracer
tensors get those symbolic sizes, meta runs happen under torch's Python
dispatcher (``frontend/symbolic_meta.py``), and a SymInt an ATen op takes as an
argument (``view``'s sizes, ``new_zeros``' sizes, a scalar) becomes a node
computing it from the symbol placeholders, so forward and backward graphs are
dynamic too. Costs (the partitioner's bytes) read the hints.
"""
from __future__ import annotations

import dataclasses
import math
import operator

import torch

from ..errors import Unsupported
from ..frontend.size_node import env_of, expr_of, hint_of, is_symbolic
from ..frontend.symbolic import MATH_FUNCTIONS, ROUNDING_FUNCTIONS, Fn, Symbol

_FN_OPS = {"floordiv": operator.floordiv, "mod": operator.mod, "truediv": operator.truediv,
           "pow": operator.pow, "max": torch.sym_max, "min": torch.sym_min,
           **{name: getattr(torch, f"_sym_{name}") for name in MATH_FUNCTIONS},
           **{name: getattr(math, name) for name in ROUNDING_FUNCTIONS}}


def symbolic_placeholder_meta(node: torch.fx.Node):
    """The placeholder's symbolic meta value (a SymInt, or a meta tensor with symbolic
    sizes from surge's shape environment), else None."""
    val = node.meta.get("val")
    if is_symbolic(val) or (isinstance(val, torch.Tensor) and env_of(val) is not None):
        return val
    return None


class SymbolNodes:
    """Symbol -> the ATen graph's node holding it; expressions emitted once each."""

    def __init__(self, graph: torch.fx.Graph):
        self.graph = graph
        self.env = None
        self.by_symbol: dict = {}
        self._emitted: dict = {}

    def add_input(self, node: torch.fx.Node, value) -> None:
        if not is_symbolic(value):
            return
        self.env = value.node.env
        atom = value.node.expr.single_atom()
        if isinstance(atom, Symbol):
            self.by_symbol.setdefault(atom, node)

    @property
    def active(self) -> bool:
        return self.env is not None

    def value(self, a):
        """The graph argument for ``a``: a node for a symbolic number, else ``a``."""
        if not is_symbolic(a):
            return a
        expr = a.node.env.simplify(expr_of(a))
        c = expr.constant()
        if c is not None:
            return c
        return self._emit(expr)

    def _emit(self, expr):
        found = self._emitted.get(expr)
        if found is not None:
            return found
        total = None
        for mono, coeff in expr.terms:
            term = None
            for atom, power in mono:
                factor = self._atom(atom)
                for _ in range(power):
                    term = factor if term is None else self._node(operator.mul, term, factor)
            term = coeff if term is None else term if coeff == 1 else self._node(operator.mul, term, coeff)
            total = term if total is None else self._node(operator.add, total, term)
        self._emitted[expr] = total
        return total

    def _atom(self, atom):
        if isinstance(atom, Symbol):
            node = self.by_symbol.get(atom)
            if node is None:
                raise Unsupported(f"size symbol {atom.name} is not an input of the graph")
            return node
        assert isinstance(atom, Fn)
        args = tuple(x.constant() if x.constant() is not None else self._emit(x) for x in atom.args)
        return self._node(_FN_OPS[atom.op], *args)

    def _node(self, fn, *args):
        node = self.graph.call_function(fn, args)
        node.meta["val"] = fn(*(x.meta["val"] if isinstance(x, torch.fx.Node) else x for x in args))
        return node


def meta_scalar(a):
    """A symbolic float runs meta kernels as its hint (any float for one read back from a
    tensor, which has none); symbolic ints stay (they may be sizes)."""
    if isinstance(a, torch.SymFloat):
        hint = hint_of(a)
        return 1.0 if hint is None else hint
    return a


def concrete(value):
    """Hints for sizes (shapes, numels) where only a cost or an example is needed (a size
    computed from data, which has none, at the shape environment's cost estimate)."""
    if is_symbolic(value) and value.node.hint is None:
        return value.node.env.cost_hint(value.node.env.simplify(expr_of(value)))
    if isinstance(value, (tuple, list, torch.Size)) and any(is_symbolic(v) and v.node.hint is None for v in value):
        return tuple(concrete(v) for v in value)
    return hint_of(value)


class RuntimeSize:
    """A symbolic view argument of an output the runtime replays: evaluated from the call's
    inputs (the symbols' placeholders hold their values)."""

    def __init__(self, expr, positions: dict):
        self.expr = expr
        self.positions = positions   # symbol -> index of its graph input

    def value(self, inputs):
        return self.expr.evaluate(lambda s: inputs[self.positions[s]])


def bind_chain(chain: tuple, tracer) -> tuple:
    """``chain`` with its symbolic arguments as ``RuntimeSize``s (unchanged when it has none)."""
    from torch.utils import _pytree as pytree

    if not any(is_symbolic(a) for step in chain for a in pytree.tree_leaves((step.args, step.kwargs))):
        return chain
    index = {node: i for i, (node, _) in enumerate(tracer.inputs)}
    positions = {s: index[n] for s, n in tracer.symbols.by_symbol.items()}

    def bind(a):
        if not is_symbolic(a):
            return a
        expr = a.node.env.simplify(expr_of(a))
        missing = expr.symbols() - set(positions)
        if missing:
            raise Unsupported(f"an output view's size uses {sorted(s.name for s in missing)}, not graph inputs")
        return RuntimeSize(expr, positions)

    return tuple(dataclasses.replace(step, args=pytree.tree_map(bind, step.args),
                                     kwargs=pytree.tree_map(bind, step.kwargs), symbolic=True)
                 for step in chain)


def resolve_chain(chain: tuple, inputs) -> tuple:
    """The chain with each ``RuntimeSize`` replaced by its value for this call."""
    from torch.utils import _pytree as pytree

    def resolve(a):
        return a.value(inputs) if isinstance(a, RuntimeSize) else a

    return tuple(dataclasses.replace(step, args=pytree.tree_map(resolve, step.args),
                                     kwargs=pytree.tree_map(resolve, step.kwargs), symbolic=False)
                 for step in chain)
