"""Dynamo's symbolic graphs on surge's shape environment.

Under ``torch.compile(f, backend=surge.backend)``, once a size changed Dynamo hands the
backend graphs with SymInt placeholders and fake tensors whose sizes are expressions of
Dynamo's own shape environment (sympy symbols). surge's aot layer and lowering reason
about sizes with surge's ``ShapeEnv`` (``frontend/shape_env.py``), so ``ForeignSizes``
makes each of Dynamo's size symbols (every one is a SymInt placeholder: Dynamo lifts
them) a symbol of a fresh surge ``ShapeEnv`` with the call's value as its hint and
Dynamo's range, rebuilds the placeholders' symbolic metadata from it, and hands that
graph to the kernel backend, which then compiles one graph for every size.

Dynamo checks the guards it recorded; what surge's own trace decides on sizes after
that (a decomposition that branches on a size) is a fact of surge's environment that
Dynamo never sees. Such facts (and ranges they narrowed) become checks of the compiled
variant, run on each call from its size arguments; a call that breaks them compiles
another variant for its sizes (``SURGE_LOGS=dynamic`` names the check). A graph whose
symbols cannot be rebuilt this way (a size that is no placeholder, a size expression
with no surge form) is compiled per concrete sizes (``specialize.SpecializedPerSizes``).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
import torch.fx

from .. import logs
from ..counters import counters
from ..frontend.shape_env import ShapeEnv
from ..frontend.size_node import is_symbolic
from ..frontend.symbolic import INF

MAX_VARIANTS = 8


class NotImportable(Exception):
    """The graph's sizes have no form in surge's shape environment."""


def has_foreign_sizes(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether a graph carries another shape environment's symbolic sizes (Dynamo's)."""
    for value in example_inputs:
        if isinstance(value, torch.SymInt) and not is_symbolic(value):
            return True
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = _traced(node)
            if isinstance(val, torch.Tensor) and any(isinstance(s, torch.SymInt) and not is_symbolic(s)
                                                     for s in (*val.shape, *val.stride())):
                return True
    return False


@dataclass(frozen=True)
class PlaceholderSource:
    """Where a symbol's value comes from: a size argument of the graph (for logs)."""
    placeholder: str
    index: int

    def name(self) -> str:
        return f"{self.placeholder} (graph input {self.index})"


class ForeignSizes:
    """Callable with the graph's arguments; compiles a variant per set of checks broken."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, compile_graph):
        self.gm = gm
        self.compile_graph = compile_graph     # (gm, example inputs) -> callable
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # position -> Dynamo's symbol, for each size placeholder
        self.size_positions = {}
        for i, value in enumerate(example_inputs):
            if isinstance(value, torch.SymInt):
                symbol = value.node.expr
                if not getattr(symbol, "is_Symbol", False):
                    raise NotImportable(f"size input {i} is the expression {symbol}, not a symbol")
                self.size_positions[i] = (symbol, value.node)
        self.variants: list = []   # (checks, compiled)
        self._add_variant([_hint(v) for v in example_inputs])

    def __call__(self, *args):
        for checks, compiled in self.variants:
            if _holds(checks, args):
                return compiled(*args)
        if len(self.variants) >= MAX_VARIANTS:   # never an error: the graph as it is
            return self.gm(*args)
        return self._add_variant(list(args), _first_broken(self.variants[-1][0], args))(*args)

    def _add_variant(self, args: list, broken: str | None = None):
        if broken is not None:
            logs.log("dynamic", f"sizes {_describe(args)} break {broken}, a condition surge's trace of a "
                                f"graph from Dynamo decided: compiling variant {len(self.variants) + 1}")
            counters["size_variants"] += 1
        env = ShapeEnv()
        symbols = {}        # Dynamo's symbol -> surge's SymInt
        initial = {}
        for i, (symbol, node) in self.size_positions.items():
            low, high = _foreign_range(symbol, node)
            sym = env.size_symbol(PlaceholderSource(self.placeholders[i].name, i), args[i],
                                  "a symbolic size of Dynamo's graph", low, high)
            symbols[symbol] = sym
            initial[sym.node.expr.single_atom()] = (env.range(sym.node.expr.single_atom()), i)
        graph = torch.fx.Graph()
        out = graph.graph_copy(self.gm.graph, {})
        graph.output(out)
        gm = torch.fx.GraphModule(self.gm, graph)
        for node, old in zip((n for n in gm.graph.nodes if n.op == "placeholder"), self.placeholders):
            node.meta["val"] = _rebuilt(_traced(old), symbols)
            val = _traced(old)
            if isinstance(val, torch.Tensor):
                node.meta["device"] = val.device
        examples = [a for a in args]
        compiled = self.compile_graph(gm, examples)
        self.variants.append((_checks(env, initial), compiled))
        return compiled


def _traced(node):
    return node.meta.get("val", node.meta.get("example_value"))


def _hint(value):
    if isinstance(value, torch.SymInt):
        return value.node.hint if value.node.hint is not None else int(value)
    return value


def _foreign_range(symbol, node) -> tuple:
    low, high = 2, INF
    ranges = getattr(getattr(node, "shape_env", None), "var_to_range", None) or {}
    vr = ranges.get(symbol)
    if vr is not None:
        if getattr(vr.lower, "is_Integer", False):
            low = max(low, int(vr.lower))
        if getattr(vr.upper, "is_Integer", False):
            high = int(vr.upper)
    return low, high


def _rebuilt(val, symbols: dict):
    """A placeholder's traced value with Dynamo's sizes as surge's SymInts."""
    if isinstance(val, torch.SymInt):
        return symbols[val.node.expr]
    if not isinstance(val, torch.Tensor):
        return val
    sizes = [_surge_size(s, symbols) for s in val.shape]
    strides = [_surge_size(s, symbols) for s in val.stride()]
    meta = torch.empty_strided(sizes, strides, dtype=val.dtype, device="meta")
    if val.requires_grad:
        meta.requires_grad_(True)
    return meta


_FUNCTIONS = {"FloorDiv": operator.floordiv, "CleanDiv": operator.floordiv, "Mod": operator.mod,
              "PythonMod": operator.mod, "Max": torch.sym_max, "Min": torch.sym_min}


def _surge_size(value, symbols: dict):
    if not isinstance(value, torch.SymInt):
        return int(value)
    return _sympy_to_surge(value.node.expr, symbols)


def _sympy_to_surge(expr, symbols: dict):
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        found = symbols.get(expr)
        if found is None:
            raise NotImportable(f"the size symbol {expr} is not a graph input")
        return found
    args = [_sympy_to_surge(a, symbols) for a in expr.args]
    if expr.is_Add:
        total = args[0]
        for a in args[1:]:
            total = total + a
        return total
    if expr.is_Mul:
        total = args[0]
        for a in args[1:]:
            total = total * a
        return total
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) >= 0:
        return args[0] ** int(expr.exp)
    fn = _FUNCTIONS.get(type(expr).__name__)
    if fn is None:
        raise NotImportable(f"the size expression {expr} has no surge form")
    return fn(*args)


def _checks(env: ShapeEnv, initial: dict) -> list:
    """(what, test(args)) for each range the trace narrowed and each fact it recorded."""
    positions = {s: i for s, (_, i) in initial.items()}

    def value(s, args):
        return args[positions[s]]

    checks = []
    for symbol, ((low, high), i) in initial.items():
        now = env.range(symbol)
        if now[0] > low:
            checks.append((f"{symbol.name} >= {now[0]}", lambda args, i=i, b=now[0]: args[i] >= b))
        if now[1] < high and not math.isinf(now[1]):
            checks.append((f"{symbol.name} <= {now[1]}", lambda args, i=i, b=now[1]: args[i] <= b))
    for fact in env.facts:
        if not fact.rel.symbols() <= set(positions):
            raise NotImportable(f"the fact {fact.rel} names a size that is no graph input")
        checks.append((f"{fact.rel} ({fact.why})",
                       lambda args, rel=fact.rel: rel.evaluate(lambda s: value(s, args))))
    return checks   # (equalities and specializations are facts too)


def _holds(checks, args) -> bool:
    for _, test in checks:
        if not test(args):
            return False
    return True


def _first_broken(checks, args) -> str:
    return next((what for what, test in checks if not test(args)), "a check")


def _describe(args) -> str:
    return ", ".join(str(list(a.shape)) if isinstance(a, torch.Tensor) else repr(a) for a in args)
