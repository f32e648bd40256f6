"""Which sizes and numbers a capture makes symbolic, and how they enter the graph.

The rule (as torch.compile's): the first capture of a code object is static.
A later capture sees the sizes (and Python int/float arguments) of earlier ones
through the code object's ``DynamicState``: a dimension whose size changed
becomes symbolic ("automatic dynamic"), so one graph serves every such size.
Sizes 0 and 1 stay specialized. ``dynamic=True`` makes every size symbolic from
the first capture, ``dynamic=False`` none. ``surge.mark_dynamic`` (and torch's
``torch._dynamo.mark_dynamic``: the attribute it sets on the tensor is read,
Dynamo is never imported), ``maybe_mark_dynamic`` and ``mark_static`` mark
dimensions of one tensor.

A symbolic dimension becomes a symbol of the capture's ``ShapeEnv``, read by the
entry as ``x.shape[d]`` (``SizeSource``) and handed to the backend as a SymInt
placeholder before the tensor, as Dynamo hands them. A backend that cannot take
symbolic sizes (``accepts_symbolic_sizes`` False on the callable) gets static
graphs instead: the capture makes nothing symbolic, and says so under
``SURGE_LOGS=dynamic``.
"""
from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field

import torch

from .. import logs
from .meta_cache import MetaCache
from .shape_env import DataDependent, ShapeEnv
from .size_node import expr_of, is_symbolic
from .sources import ArgSource, DefaultSource, ItemSource, KwargSource, Source
from .symbolic import MATH_FUNCTIONS, ROUNDING_FUNCTIONS, Expr, Fn, Rel, Symbol
from .variables.base import unsupported


@dataclass(frozen=True)
class ShapeSource:
    """``parent.shape``: read once per entry call, its items are the symbols' values."""
    parent: Source

    def name(self):
        return f"{self.parent.name()}.size()"

    def expr(self, parent, consts):
        return f"{parent}.shape"


@dataclass(frozen=True)
class SizeSource:
    """``parent.shape[dim]``: one dimension of a tensor input."""
    parent: ShapeSource
    dim: int

    def name(self):
        return f"{self.parent.name()}[{self.dim}]"

    def expr(self, parent, consts):
        return f"{parent}[{self.dim}]"


@dataclass
class DynamicState:
    """What earlier captures of one code object saw, by source name."""
    sizes: dict = field(default_factory=dict)
    dims: dict = field(default_factory=dict)
    numbers: dict = field(default_factory=dict)
    dynamic_numbers: set = field(default_factory=set)
    # Numbers a backend without symbolic inputs cannot take as 0-d tensors (used as sizes):
    # compiled static (number_tensors.py).
    static_numbers: set = field(default_factory=set)
    # Why values read back from tensors break this code's graphs although
    # capture_scalar_outputs is on (a decision on one, a use the backend cannot take).
    data_dependent_break: str | None = None


def accepts_scalar_reads(backend) -> bool:
    """Whether a backend takes graphs that read values back from tensors (``item`` nodes
    giving data-dependent symbols, as Dynamo hands them); surge's aot backends take such
    values as 0-d tensors instead (number_tensors.py)."""
    target = backend.func if isinstance(backend, functools.partial) else backend
    return getattr(target, "accepts_scalar_reads", True)


def accepts_data_dependent_sizes(backend) -> bool:
    """Whether a backend takes tensors whose sizes an op computes from data (``nonzero``)."""
    target = backend.func if isinstance(backend, functools.partial) else backend
    return accepts_symbolic_sizes(backend) and getattr(target, "accepts_data_dependent_sizes", True)


def accepts_symbolic_numbers(backend) -> bool:
    """Whether a backend takes int/float graph inputs as symbols; the kernel backends take
    symbolic sizes but numbers as 0-d tensors (``accepts_symbolic_numbers`` False)."""
    target = backend.func if isinstance(backend, functools.partial) else backend
    return getattr(target, "accepts_symbolic_numbers", True)


def accepts_symbolic_sizes(backend) -> bool:
    """Whether a backend takes graphs with symbolic sizes (a user's callable does, as a
    torch.compile backend does; surge's kernel backends say otherwise with the attribute)."""
    target = backend.func if isinstance(backend, functools.partial) else backend
    return getattr(target, "accepts_symbolic_sizes", True)


class DynamicDims:
    """The decisions of one capture (``tracer.dynamic``)."""

    def __init__(self, options, state: DynamicState | None, backend):
        self.mode = options.dynamic
        self.state = state if state is not None else DynamicState()
        self.env = ShapeEnv()
        self.allowed = self.mode is not False and accepts_symbolic_sizes(backend)
        # A backend without symbolic sizes still gets symbolic numbers: the frontend hands
        # them over as 0-d tensors where they only meet tensor arithmetic (number_tensors.py).
        self.numbers_as_tensors = self.mode is not False and not (self.allowed and accepts_symbolic_numbers(backend))
        self.reads_as_tensors = not accepts_scalar_reads(backend)
        self._refused_logged = False
        self.backend = backend
        # Meta results of the ops captured over symbolic sizes, by argument layouts
        self.meta_cache = MetaCache()

    @property
    def active(self) -> bool:
        return bool(self.env.symbols)

    @property
    def symbolic_meta_needed(self) -> bool:
        """Whether meta kernels must run torch's Python forms: an int symbol may be a size.
        Float symbols run meta kernels as a stand-in value, so C++ meta kernels do."""
        return any(not s.is_float for s in self.env.symbols)

    def _refuse(self, what: str) -> None:
        if not self._refused_logged and self.mode is not False:
            target = self.backend.func if isinstance(self.backend, functools.partial) else self.backend
            name = getattr(target, "__qualname__", type(target).__qualname__)
            logs.log("dynamic", f"{what} would be symbolic, but backend {name} "
                                "cannot take symbolic sizes yet: compiling static for these sizes")
            self._refused_logged = True

    def check_backend_takes_data_dependent_sizes(self) -> None:
        """Before the graph goes to a backend that cannot take data-dependent sizes: the
        ops that make them break the graph instead (the capture starts again)."""
        whys = [info.reason for info in self.env.symbols.values() if info.data_dependent and info.is_size]
        if whys and not accepts_data_dependent_sizes(self.backend):
            target = self.backend.func if isinstance(self.backend, functools.partial) else self.backend
            name = getattr(target, "__qualname__", type(target).__qualname__)
            raise DataDependent(f"backend {name} cannot take a size that depends on data "
                                f"({', '.join(whys)})")

    # ---- tensors ---------------------------------------------------------------
    def tensor_dims(self, value: torch.Tensor, source: Source) -> dict:
        """dim -> (reason, low, high) for the dimensions of ``value`` to make symbolic.
        Parameters stay static (as torch.compile keeps them): their sizes are the model's."""
        if isinstance(value, torch.nn.Parameter) or self.mode is False:
            return {}
        name = source.name()
        sizes = list(value.shape)
        previous = self.state.sizes.get(name)
        changed = self.state.dims.setdefault(name, set())
        if previous is not None and len(previous) == len(sizes):
            for d, (a, b) in enumerate(zip(previous, sizes)):
                if a != b and d not in changed:
                    changed.add(d)
                    logs.log("dynamic", f"{name} dim {d} changed from {a} to {b}: it becomes symbolic")
        self.state.sizes[name] = sizes
        wanted = {}
        static = set(getattr(value, "_dynamo_static_indices", ()) or ())
        ranges = _declared_ranges(value)
        for d, size in enumerate(sizes):
            if d in static:
                continue
            if self.mode is True:
                wanted[d] = ("dynamic=True", None, None)
            if d in changed:
                wanted[d] = ("its size changed between calls (automatic dynamic)", None, None)
            if d in _marked(value, "_dynamo_weak_dynamic_indices"):
                wanted[d] = ("maybe_mark_dynamic", None, None)
            if d in _marked(value, "_dynamo_dynamic_indices") or d in ranges:
                low, high = ranges.get(d, (None, None))
                wanted[d] = ("mark_dynamic", low, high)
        out = {}
        for d, (reason, low, high) in wanted.items():
            size = sizes[d]
            if size in (0, 1):
                logs.log("dynamic", f"{name} dim {d} has size {size}: specialized (sizes 0 and 1 always are)")
                continue
            if (low is not None and size < low) or (high is not None and size > high):
                logs.log("dynamic", f"{name} dim {d} has size {size}, outside its declared range "
                                    f"[{low}, {high}]: compiled static for this size")
                continue
            if self.mode is False:
                continue
            if not self.allowed:
                self._refuse(f"{name} dim {d}")
                continue
            out[d] = (reason, low, high)
        return out

    def symbolic_tensor(self, tx, value: torch.Tensor, source: Source, dims: dict):
        """The meta tensor of ``value`` with the dims in ``dims`` symbolic; each symbol is a
        graph input (a SymInt placeholder) read from ``source``'s shape."""
        sizes = []
        for d, size in enumerate(value.shape):
            if d in dims:
                reason, low, high = dims[d]
                size_source = SizeSource(ShapeSource(source), d)
                sym = self.env.size_symbol(size_source, size, reason, low, high)
                tx.graph.placeholder(size_source, size, f"{source.name()}_size_{d}", meta=sym)
                sizes.append(sym)
            else:
                sizes.append(size)
        strides = _symbolic_strides(sizes, value.stride(), list(value.shape))
        meta = torch.empty_strided(sizes, strides, dtype=value.dtype, device="meta")
        if value.requires_grad:
            meta.requires_grad_(True)
        return meta, strides

    # ---- Python numbers ------------------------------------------------------------
    def number(self, tx, value, source: Source):
        """A SymInt / SymFloat for an int or float argument that should be symbolic, else None."""
        if type(value) not in (int, float) or not _is_argument(source):
            return None
        name = source.name()
        previous = self.state.numbers.get(name, _UNSEEN)
        self.state.numbers[name] = value
        if previous is not _UNSEEN and previous != value and name not in self.state.dynamic_numbers \
                and type(previous) is type(value):
            self.state.dynamic_numbers.add(name)
            logs.log("dynamic", f"{name} changed from {previous!r} to {value!r}: it becomes symbolic")
        if not (self.mode is True or name in self.state.dynamic_numbers) or self.mode is False:
            return None
        if type(value) is int and value in (0, 1):
            return None
        if name in self.state.static_numbers:
            return None
        reason = "dynamic=True" if self.mode is True else "its value changed between calls (automatic dynamic)"
        sym = self.env.number_symbol(source, value, reason)
        tx.graph.placeholder(source, value, name, meta=sym)
        return sym

    # ---- symbolic values as graph nodes --------------------------------------------
    def graph_value(self, tx, value):
        """The FX argument for ``value``: a node computing a symbolic int/float from the
        symbols' placeholders, a number when it simplified to one, nested structures mapped."""
        if isinstance(value, torch.SymBool):
            return value.node.guard_bool()  # a condition as an op's argument: decided now, guarded
        if is_symbolic(value):
            expr = self.env.simplify(expr_of(value))
            c = expr.constant()
            if c is not None:
                return c
            return _emit(tx, self.env, expr)
        if type(value) is slice and any(is_symbolic(v) for v in (value.start, value.stop, value.step)):
            return slice(*(self.graph_value(tx, v) for v in (value.start, value.stop, value.step)))
        if isinstance(value, (tuple, list)) and any(is_symbolic(v) for v in value):
            return type(value)(self.graph_value(tx, v) for v in value) if not isinstance(value, torch.Size) \
                else tuple(self.graph_value(tx, v) for v in value)
        return value


_UNSEEN = object()


def _is_argument(source) -> bool:
    """Numbers passed as arguments (or items of argument containers), not attributes."""
    while isinstance(source, ItemSource):
        source = source.parent
    return isinstance(source, (ArgSource, KwargSource, DefaultSource)) or getattr(source, "param", None) is not None


def _marked(value, attr) -> set:
    return set(getattr(value, attr, ()) or ())


def _declared_ranges(value) -> dict:
    ranges = dict(getattr(value, "_surge_dynamic_range", {}) or {})
    for r in getattr(value, "_dynamo_dynamic_range", ()) or ():  # torch's _DimRange(dim, min, max)
        ranges.setdefault(r.dim, (r.min, r.max))
    return {d: (lo if lo not in (None, 0, 1) else None, hi if hi not in (None, float("inf")) else None)
            for d, (lo, hi) in ranges.items()}


def _symbolic_strides(sizes, strides, hints):
    """Strides as expressions where a stride is the product of the inner sizes (dense
    layouts, and the dense dims of transposes); other strides stay numbers."""
    order = sorted(range(len(sizes)), key=lambda d: (strides[d], hints[d]))
    out = list(strides)
    expected, expected_hint = 1, 1
    for d in order:
        if strides[d] != expected_hint:
            break
        out[d] = expected
        expected = expected * sizes[d]
        expected_hint = expected_hint * hints[d]
    return out


def tensor_guard(tx, source, value: torch.Tensor, sizes, strides) -> None:
    """The guard of a tensor input with symbolic dims: what the static guard checks,
    with the symbolic sizes left to the shape environment and strides as expressions."""
    g = tx.guards
    cls = g.consts.ref(type(value), type(value).__name__)
    dtype = g.consts.ref(value.dtype, str(value.dtype).replace("torch.", ""))
    device = g.consts.ref(value.device, "device_" + value.device.type)
    env = tx.dynamic.env
    tokens = {s: "{@" + s.name + "}" for s in env.symbols}
    dims = " and ".join(f"{{@shape}}[{d}] == {s}" for d, s in enumerate(sizes) if not is_symbolic(s))
    stride_text = "(" + "".join(expr_of(s).render(lambda sym: tokens[sym]) + ", " for s in strides) + ")"
    condition = (f"type({{v}}) is {cls} and {{v}}.dtype is {dtype} and {{v}}.device == {device} "
                 f"and len({{@shape}}) == {len(sizes)} " + (f"and {dims} " if dims else "") +
                 f"and {{v}}.stride() == {stride_text} and {{v}}.requires_grad is {value.requires_grad}")
    used = tuple((tokens[s], env.symbols[s].source) for s in env.symbols if tokens[s] in condition)
    used += (("{@shape}", ShapeSource(source)),)
    shown = [repr(expr_of(s)) if is_symbolic(s) else s for s in sizes]
    text = (f"{source.name()}: {type(value).__name__}({str(value.dtype).replace('torch.', '')}, {value.device}, "
            f"shape=[{', '.join(map(str, shown))}], stride=[{', '.join(repr(expr_of(s)) for s in strides)}], "
            f"requires_grad={value.requires_grad})")
    g.add(source, condition, text, more=used)


_FN_OPS = {"floordiv": operator.floordiv, "mod": operator.mod, "truediv": operator.truediv,
           "pow": operator.pow, "max": torch.sym_max, "min": torch.sym_min,
           **{name: getattr(torch, f"_sym_{name}") for name in MATH_FUNCTIONS},
           **{name: getattr(math, name) for name in ROUNDING_FUNCTIONS}}


def _emit(tx, env: ShapeEnv, expr):
    cache = tx.graph.symbolic_nodes
    found = cache.get(expr)
    if found is not None:
        return found
    total = None
    for mono, coeff in expr.terms:
        term = None
        for atom, power in mono:
            factor = _emit_atom(tx, env, atom)
            for _ in range(power):
                term = factor if term is None else _node(tx, env, operator.mul, term, factor)
        if term is None:
            term = coeff
        elif coeff != 1:
            term = _node(tx, env, operator.mul, term, coeff)
        total = term if total is None else _node(tx, env, operator.add, total, term)
    cache[expr] = total
    return total


def _emit_atom(tx, env, atom):
    if isinstance(atom, Symbol):
        if env.is_unbacked(atom):
            return _data_dependent_node(tx, env, atom)
        source = env.symbols[atom].source
        return tx.graph.placeholder(source, env.hint(atom), source.name(), meta=env.value_of(atom))
    assert isinstance(atom, Fn)
    args = (_emit(tx, env, x) if x.constant() is None else x.constant() for x in atom.args)
    return _node(tx, env, _FN_OPS[atom.op], *args)


def _data_dependent_node(tx, env, symbol):
    """The graph node of a data-dependent value: its read, or ``t.size(d)`` of the tensor
    whose size it is (made on first use)."""
    info = env.symbols[symbol]
    if info.node is None:
        tensor_node, dim = info.size_of
        info.node = tx.graph.create_node("call_method", "size", (tensor_node, dim), {}, tx.stack_trace())
        info.node.meta["val"] = env.value_of(symbol)
    return info.node


def _node(tx, env, fn, *args):
    node = tx.graph.create_node("call_function", fn, args, {}, tx.stack_trace())
    node.meta["val"] = fn(*(_meta_val(a) for a in args))
    return node


def _meta_val(x):
    return x.meta["val"] if isinstance(x, torch.fx.Node) else x


def install_shape_guards(tx) -> None:
    """The shape environment's checks (ranges, then facts) as guards of the entry."""
    dyn = getattr(tx, "dynamic", None)
    if dyn is None or not dyn.env.symbols or getattr(tx, "_shape_guards_installed", False):
        return
    tx._shape_guards_installed = True
    env = dyn.env
    tokens = {s: "{@" + s.name + "}" for s in env.symbols}
    for condition, text in env.guard_conditions(lambda s: tokens[s]):
        used = tuple((tokens[s], env.symbols[s].source) for s in env.symbols if tokens[s] in condition)
        # A failing check reports the value of its first symbol (SURGE_LOGS=recompiles).
        first = used[0][1] if used else None
        tx.guards.add(first, condition, f"{text} (the value shown: {first.name()})" if len(used) > 1 else text,
                      more=used)


def symbolic_expression(codegen, value) -> str:
    """Python source computing a symbolic int/float from the entry's reads of its symbols."""
    node = value.node
    env = node.env
    if isinstance(node.expr, (Expr, Rel)) and env.data_dependent(node.expr):
        env.refuse_data_dependent(node.expr, "the value, returned or handed across a graph break,")
    if isinstance(node.expr, (Expr,)):
        expr = env.simplify(node.expr)
        text = expr.render(lambda s: codegen.value_of(env.symbols[s].source))
        return f"float({text})" if node.pytype is float else text
    if isinstance(node.expr, Rel):  # a comparison of sizes, computed by the entry
        return "(" + Rel(node.expr.op, env.simplify(node.expr.expr)).render(
            lambda s: codegen.value_of(env.symbols[s].source)) + ")"
    unsupported("returning a combination of conditions on symbolic sizes")
