"""Python numbers of a graph as 0-d tensors, for backends that take no symbolic numbers.

A number that changes between calls (a learning rate, a step counter, a value
read back from a tensor and handed across a graph break) is a graph input: a
SymInt / SymFloat placeholder (``dynamic_dims.py``). The kernel backends take
symbolic sizes but no symbolic scalars, so such a graph would be compiled again for
every value. Most
numbers only meet tensor arithmetic (``x * lr``, ``torch.where(m, x, eps)``), and
there a 0-d tensor computes what the number does: this pass turns each number
placeholder into a 0-d tensor placeholder (float64 for floats, int64 for ints:
the precision of a Python number), Python arithmetic on numbers into the same
arithmetic on those tensors, and each operand of a tensor op into the 0-d tensor
converted to the dtype the op would give the Python number
(``torch.result_type(x, 1.0)``), so type promotion is eager's. The runner wraps
the numbers of each call in tensors.

A number with any other use (a size, an ``alpha=``, a shape argument) cannot be a
tensor: ``convert`` reports those numbers, and the capture compiles them static.
"""
from __future__ import annotations

import math
import operator

import torch
import torch.fx

from .. import logs
from .shape_env import DataDependent
from .symbolic import MATH_FUNCTIONS, ROUNDING_FUNCTIONS

# Python arithmetic on numbers -> the same on 0-d tensors (numbers.float64 / int64 keep
# Python's results for + - * and the floor forms; true division goes through float64).
_NUMBER_OPS = {
    operator.add: torch.add, operator.sub: torch.sub, operator.mul: torch.mul,
    operator.truediv: torch.true_divide, operator.floordiv: torch.floor_divide,
    operator.mod: torch.remainder, operator.pow: torch.pow, operator.neg: torch.neg,
    torch.sym_max: torch.maximum, torch.sym_min: torch.minimum, torch.sym_float: None,
    **{getattr(torch, f"_sym_{name}"): getattr(torch, name) for name in MATH_FUNCTIONS},
    **{getattr(math, name): getattr(torch, name) for name in ROUNDING_FUNCTIONS},
}

# Tensor ops whose Python-number operands may be 0-d tensors of the promoted dtype.
_ELEMENTWISE_FUNCTIONS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod, operator.pow,
    operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
    operator.iadd, operator.isub, operator.imul, operator.itruediv,
    torch.add, torch.sub, torch.subtract, torch.mul, torch.multiply, torch.div, torch.divide,
    torch.true_divide, torch.floor_divide, torch.remainder, torch.fmod, torch.pow, torch.rsub,
    torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge, torch.where, torch.clamp, torch.clip,
    torch.masked_fill,
}
_ELEMENTWISE_METHODS = {
    "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow",
    "eq", "ne", "lt", "le", "gt", "ge", "clamp", "clip", "masked_fill",
    "add_", "sub_", "mul_", "div_", "pow_", "clamp_", "masked_fill_", "fill_",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__pow__", "__rpow__",
}
# Keyword arguments that are operands (``alpha=`` is not: it must be a number).
_OPERAND_KWARGS = {"other", "min", "max", "value", "exponent", "input"}
_OPMATH = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
# Ops whose first tensor argument is a mask or condition: the data operand decides the dtype.
_MASK_FIRST = {torch.where}


def _is_number(node) -> bool:
    return isinstance(node, torch.fx.Node) and isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat))


def _number_kind(node) -> torch.dtype:
    return torch.float64 if isinstance(node.meta["val"], torch.SymFloat) else torch.int64


def _tensor_val(a):
    if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
        return a.meta["val"]
    return None


def _consumer_ok(user: torch.fx.Node, number: torch.fx.Node, selected) -> bool:
    """Whether ``number`` is only a direct operand of ``user`` where a 0-d tensor may stand."""
    if _is_number(user):
        return selected(user) and user.op == "call_function" and user.target in _NUMBER_OPS
    if not isinstance(user.meta.get("val"), torch.Tensor):
        return False
    if user.op == "call_function":
        ok = user.target in _ELEMENTWISE_FUNCTIONS
    elif user.op == "call_method":
        ok = user.target in _ELEMENTWISE_METHODS
    else:
        ok = False
    if not ok:
        return False
    if any(v is number for k, v in user.kwargs.items() if k not in _OPERAND_KWARGS):
        return False
    for a in (*user.args, *user.kwargs.values()):
        if isinstance(a, (list, tuple, dict, slice)):
            inside: list = []
            torch.fx.node.map_arg(a, inside.append)
            if number in inside:
                return False
    return any(_tensor_val(a) is not None for a in (*user.args, *user.kwargs.values()))


def is_scalar_read(node) -> bool:
    """A value the graph reads back from a tensor (``.item()``)."""
    return node.op == "call_method" and node.target == "item"


def number_roots(node: torch.fx.Node) -> set:
    """The placeholders and scalar reads a number node is computed from."""
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n.op == "placeholder" or is_scalar_read(n):
            out.add(n)
            continue
        stack.extend(a for a in n.all_input_nodes if _is_number(a))
    return out


def selector(only_reads: bool):
    """Which number nodes to convert: all of them, or those computed from scalar reads only."""
    if not only_reads:
        return _is_number
    return lambda n: _is_number(n) and all(is_scalar_read(r) for r in number_roots(n))


def unconvertible_numbers(gm: torch.fx.GraphModule, selected) -> list[torch.fx.Node]:
    """The selected number nodes with a use no 0-d tensor can take."""
    bad = []
    for node in gm.graph.nodes:
        if not selected(node):
            continue
        if node.op == "placeholder" or is_scalar_read(node) or \
                (node.op == "call_function" and node.target in _NUMBER_OPS):
            if all(u.op != "output" and _consumer_ok(u, node, selected) for u in node.users):
                continue
        bad.append(node)
    return bad


def has_numbers(gm: torch.fx.GraphModule) -> bool:
    return any(_is_number(n) for n in gm.graph.nodes)


class NumbersAsTensors:
    """The compiled graph of a converted one: the numbers at ``positions`` become 0-d tensors."""

    __slots__ = ("compiled", "conversions")

    def __init__(self, compiled, conversions):
        self.compiled = compiled
        self.conversions = conversions   # (position, dtype, device)

    def __call__(self, *args):
        args = list(args)
        for i, dtype, device in self.conversions:
            args[i] = torch.scalar_tensor(args[i], dtype=dtype, device=device)  # 3x faster than torch.tensor
        return self.compiled(*args)


def _graph_device(example_inputs) -> torch.device:
    """Where the numbers go: the device of the graph's tensors, so that the kernels reading
    them fuse (a CPU tensor among CUDA ones would be read by an extern op)."""
    for value in example_inputs:
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            return value.device
    return torch.device("cpu")


def convert(gm: torch.fx.GraphModule, example_inputs: list, selected=_is_number):
    """(new graph module, new example inputs, conversions) with every selected number a 0-d
    tensor. The caller has checked ``unconvertible_numbers`` is empty."""
    graph = torch.fx.Graph()
    env: dict = {}
    conversions = []
    inputs = list(example_inputs)
    device = _graph_device(example_inputs)
    position = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            new = graph.placeholder(node.name)
            new.meta.update(node.meta)
            if selected(node):
                dtype = _number_kind(node)
                new.meta["val"] = torch.empty((), dtype=dtype, device="meta")
                new.meta["device"] = device
                conversions.append((position, dtype, device))
                inputs[position] = torch.scalar_tensor(inputs[position], dtype=dtype, device=device)
            env[node] = new
            position += 1
            continue
        if is_scalar_read(node) and selected(node):
            # A value read back from a tensor: the tensor itself, out of autograd (as
            # .item() is), at a Python number's precision.
            source = env[node.args[0]]
            detached = _meta_node(graph, "call_method", "detach", (source,), {}, node)
            env[node] = _meta_node(graph, "call_method", "to", (detached, _number_kind(node)), {}, node)
            continue
        if selected(node):
            env[node] = _number_op(graph, node, env, device)
            continue
        if node.op in ("call_function", "call_method") and not _is_number(node) \
                and any(selected(a) for a in node.all_input_nodes):
            env[node] = _tensor_op(graph, node, env, selected)
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    out = torch.fx.GraphModule(gm, graph)
    return out, inputs, conversions


def _meta_node(graph, kind, target, args, kwargs, like):
    node = graph.create_node(kind, target, args, kwargs)
    node.meta["stack_trace"] = like.meta.get("stack_trace")

    def meta(a):
        return a.meta["val"] if isinstance(a, torch.fx.Node) else a
    m_args = torch.fx.node.map_aggregate(args, meta)
    m_kwargs = {k: "meta" if k == "device" else v for k, v in torch.fx.node.map_aggregate(kwargs, meta).items()}
    if kind == "call_method":
        node.meta["val"] = getattr(m_args[0], target)(*m_args[1:], **m_kwargs)
    else:
        node.meta["val"] = target(*m_args, **m_kwargs)
    devices = [a.meta["device"] for a in args if isinstance(a, torch.fx.Node) and "device" in a.meta]
    node.meta["device"] = kwargs.get("device") or (devices[0] if devices else torch.device("cpu"))
    return node


def _number_op(graph, node, env, device):
    result = _number_kind(node)
    args = []
    for a in node.args:
        if isinstance(a, torch.fx.Node):
            a = env[a]
            if result is torch.float64 and a.meta["val"].dtype is not torch.float64:
                a = _meta_node(graph, "call_method", "to", (a, torch.float64), {}, node)
        elif node.target in (torch.sym_max, torch.sym_min):
            a = _meta_node(graph, "call_function", torch.scalar_tensor, (a,), {"dtype": result, "device": device},
                           node)
        args.append(a)
    fn = _NUMBER_OPS[node.target]
    if fn is None:   # sym_float: the conversion above is the whole op
        return args[0]
    out = _meta_node(graph, "call_function", fn, tuple(args), {}, node)
    if out.meta["val"].dtype is not result:   # floor/ceil/trunc of a float: an int
        out = _meta_node(graph, "call_method", "to", (out, result), {}, node)
    return out


def _tensor_op(graph, node, env, selected):
    tensors = [a for a in (*node.args, *node.kwargs.values()) if _tensor_val(a) is not None]
    if node.target in _MASK_FIRST or node.target in ("masked_fill", "masked_fill_"):
        data = [t for t in tensors if t.meta["val"].dtype is not torch.bool] or tensors
        reference = data[0] if node.target in _MASK_FIRST else tensors[0]
    else:
        reference = tensors[0]

    def operand(a):
        if not (isinstance(a, torch.fx.Node) and selected(a)):
            return env[a] if isinstance(a, torch.fx.Node) else a
        stand_in = 1.0 if isinstance(a.meta["val"], torch.SymFloat) else 1
        dtype = torch.result_type(reference.meta["val"], stand_in)
        # A 16-bit float op computes with a Python number in float32 (its opmath type);
        # a float32 0-d tensor does the same, and the 16-bit tensor still decides the result.
        dtype = _OPMATH.get(dtype, dtype)
        value = env[a]
        if value.meta["val"].dtype is dtype:
            return value
        return _meta_node(graph, "call_method", "to", (value, dtype), {}, node)
    args = tuple(operand(a) for a in node.args)
    kwargs = {k: operand(v) for k, v in node.kwargs.items()}
    new = graph.create_node(node.op, node.target, args, kwargs, node.name)
    new.meta.update(node.meta)
    return new


class StaticNumbersNeeded(Exception):
    """Numbers of the graph that a backend without symbolic inputs cannot take as tensors:
    the capture runs again with them static (recorded in the code object's DynamicState)."""

    def __init__(self, names):
        super().__init__(", ".join(sorted(names)))
        self.names = names


def numbers_for_backend(dynamic, gm: torch.fx.GraphModule, example_inputs: list, only_reads: bool,
                        keep_reads: bool = False):
    """(graph module, example inputs, wrap) with the graph's numbers (``only_reads``: those
    computed from values read back from tensors) as 0-d tensors; ``wrap(compiled)`` is what
    the entry calls. A number with a use only a Python number can take raises: a read
    ``DataDependent`` (the reads break the graph instead), an input ``StaticNumbersNeeded``;
    with ``keep_reads`` (a backend that takes data-dependent symbols) such a read and what is
    computed from it stay as they are."""
    # a backend with symbolic sizes keeps them: only numbers computed from no size convert
    sizes = _size_placeholders(dynamic, gm)
    selected = _without(selector(only_reads), sizes)
    bad = unconvertible_numbers(gm, selected)
    kept: set = set()
    while bad and keep_reads:
        kept |= {r for node in bad for r in number_roots(node) if is_scalar_read(r)}
        if not kept:
            break
        selected = _without(selector(only_reads), kept | sizes)
        bad = unconvertible_numbers(gm, selected)
    if bad:
        roots = {root for node in bad for root in number_roots(node)}
        reads = [r for r in roots if is_scalar_read(r)]
        if reads:
            where = ", ".join(sorted({_line_of(r) for r in reads}))
            raise DataDependent(f"the backend takes a value read back from a tensor ({where}) as a 0-d tensor "
                                "only where it meets tensor arithmetic, and this one is used as a size, "
                                "a Python number or an output")
        names = {r.meta["source"] for r in roots if r.op == "placeholder"}
        if names <= dynamic.state.static_numbers:   # static already, yet here: not a number argument
            names = set()
        if not names:
            raise DataDependent("the backend takes numbers only as 0-d tensors, and one that depends on "
                                "data is used as a size or a Python number")
        dynamic.state.static_numbers |= names
        for name in sorted(names):
            logs.log("dynamic", f"{name} is used where only a Python number can go (a size, alpha=, "
                                "a shape): compiled static, as the backend takes no symbolic numbers")
        raise StaticNumbersNeeded(names)
    converted, inputs, conversions = convert(gm, example_inputs, selected)
    if conversions:
        logs.log("dynamic", "numbers passed to the backend as 0-d tensors: " + ", ".join(
            n.meta["source"] for n in gm.graph.nodes if n.op == "placeholder" and selected(n)))
    return converted, inputs, (lambda compiled: NumbersAsTensors(compiled, conversions)) if conversions else None


def _size_placeholders(dynamic, gm: torch.fx.GraphModule) -> set:
    """The placeholders of symbolic tensor sizes (a backend that takes symbolic sizes)."""
    from .size_node import is_symbolic

    out = set()
    for node in gm.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        atom = val.node.expr.single_atom() if is_symbolic(val) and hasattr(val.node.expr, "single_atom") else None
        info = dynamic.env.symbols.get(atom) if atom is not None else None
        if info is not None and info.is_size:
            out.add(node)
    return out


def _without(selected, kept: set):
    return lambda n: selected(n) and not (number_roots(n) & kept)


def _line_of(node) -> str:
    return node.meta.get("read_at") or node.name
