"""Values: the expression DAG that computes one element of a loop-IR buffer.

A value is built from loads of buffers at index expressions (sympy), constants,
index values (iota), operations from a closed vocabulary (``OPS``), and
masked sub-expressions (only evaluated, and only loading, where a condition
holds: cat, pad, out-of-range taps). Values are hash-consed: building the same
expression twice returns the same object, so common sub-expressions are shared
by construction and code generators can memoize by identity.

Values carry their logical dtype (what eager PyTorch would produce); code
generators decide how to compute them (fp16/bf16 in fp32, for instance).
"""
from __future__ import annotations

import weakref

import sympy
import torch

from .op_groups import FUSED_FORM_OPS, OPS

_INTERNED: "weakref.WeakValueDictionary[tuple, Value]" = weakref.WeakValueDictionary()


class Value:
    """Base of every DAG node; ``children`` are the values it reads."""

    __slots__ = ("dtype", "children", "__weakref__")
    kind = "value"

    def __new__(cls, key, dtype, children):
        full_key = (cls.kind, dtype, tuple(id(c) for c in children)) + key
        found = _INTERNED.get(full_key)
        if found is not None:
            return found
        obj = object.__new__(cls)
        obj.dtype = dtype
        obj.children = tuple(children)
        _INTERNED[full_key] = obj
        return obj

    def __repr__(self) -> str:
        return format_value(self)


class Load(Value):
    """``buffer[index]``; ``indirect`` binds symbols of ``index`` to values (gathers)."""

    __slots__ = ("buffer", "index", "indirect")
    kind = "load"

    def __new__(cls, buffer: str, index: sympy.Expr, dtype: torch.dtype, indirect=()):
        syms = tuple(s for s, _ in indirect)
        obj = super().__new__(cls, (buffer, index, syms), dtype, [v for _, v in indirect])
        if not hasattr(obj, "buffer"):
            obj.buffer, obj.index, obj.indirect = buffer, index, tuple(indirect)
        return obj


def scalar_of(value, dtype: torch.dtype):
    """The Python scalar ``value`` as an element of ``dtype`` holds it: a float for float
    dtypes, a bool for bool, and for integer dtypes an int wrapped into the dtype's range
    (as a C cast does), so code generators render a literal of the type it meets."""
    if dtype.is_floating_point:
        return float(value)
    if dtype.is_complex:  # no code generator renders these: the backend refuses the dtype by name
        return complex(value)
    if dtype == torch.bool:
        return bool(value)
    value = int(value)
    info = torch.iinfo(dtype)
    span = info.max - info.min + 1
    return (value - info.min) % span + info.min


class Constant(Value):
    __slots__ = ("value",)
    kind = "constant"

    def __new__(cls, value, dtype: torch.dtype):
        value = scalar_of(value, dtype)
        # repr keeps nan/inf and -0.0 distinct in the intern key
        obj = super().__new__(cls, (repr(value),), dtype, [])
        if not hasattr(obj, "value"):
            obj.value = value
        return obj


class IndexValue(Value):
    """An index expression used as a value (iota, positions for argmax, masks)."""

    __slots__ = ("expr",)
    kind = "index"

    def __new__(cls, expr: sympy.Expr, dtype: torch.dtype = torch.int64):
        obj = super().__new__(cls, (expr,), dtype, [])
        if not hasattr(obj, "expr"):
            obj.expr = expr
        return obj


class Op(Value):
    """``op(*args)`` from ``OPS``; ``cast`` converts its argument to ``dtype``."""

    __slots__ = ("op",)
    kind = "op"

    def __new__(cls, op: str, args, dtype: torch.dtype):
        assert op in OPS, f"unknown loop-IR op {op!r}"
        obj = super().__new__(cls, (op,), dtype, list(args))
        if not hasattr(obj, "op"):
            obj.op = op
        return obj


class Masked(Value):
    """``body`` where ``mask`` holds, ``other`` elsewhere; ``body`` only loads under ``mask``."""

    __slots__ = ("other",)
    kind = "masked"

    def __new__(cls, mask: Value, body: Value, other):
        other = scalar_of(other, body.dtype)   # a pad value of -100.0 over int64 labels is -100
        obj = super().__new__(cls, (repr(other),), body.dtype, [mask, body])
        if not hasattr(obj, "other"):
            obj.other = other
        return obj

    @property
    def mask(self) -> Value:
        return self.children[0]

    @property
    def body(self) -> Value:
        return self.children[1]


class IndexCheck(Value):
    """``index`` where ``0 <= index < size``; elsewhere 0 (an index that reads and writes
    inside the tensor), and the kernel reports ``error`` (exception type name, message) to
    the code that launched it, which raises it: an out-of-range index raises, as in eager."""

    __slots__ = ("error",)
    kind = "index_check"

    def __new__(cls, index: Value, size: Value, error: tuple):
        obj = super().__new__(cls, (error,), torch.int64, [index, size])
        if not hasattr(obj, "error"):
            obj.error = error
        return obj

    @property
    def index(self) -> Value:
        return self.children[0]

    @property
    def size(self) -> Value:
        return self.children[1]


def cast_scalar(value, src: torch.dtype, dst: torch.dtype):
    """``value`` (an element of ``src``) converted to ``dst`` as a tensor conversion does it:
    truncating floats to integers, wrapping integers, rounding to fp16/bf16."""
    return scalar_of(torch.tensor(value, dtype=src).to(dst).item(), dst)


def cast(value: Value, dtype: torch.dtype) -> Value:
    if value.dtype == dtype:
        return value
    if isinstance(value, Constant):
        return Constant(value.value, dtype)
    return Op("cast", [value], dtype)


def walk(root: Value):
    """Every value reachable from ``root``, each once, children before parents."""
    seen, order, stack = set(), [], [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in reversed(node.children):
            if id(child) not in seen:
                stack.append((child, False))
    return order


def loads_of(root: Value) -> list:
    return [v for v in walk(root) if isinstance(v, Load)]


def loaded_buffers(root: Value) -> set:
    return {v.buffer for v in walk(root) if isinstance(v, Load)}


def op_count(root: Value) -> int:
    """Ops computed for one element; a fused form counts as the ops it stands for."""
    return sum(FUSED_FORM_OPS.get(v.op, 1) for v in walk(root) if isinstance(v, Op))


def substitute_index(root: Value, mapping: dict, rewrite=None) -> Value:
    """The same value with ``mapping`` (symbol -> expr) applied to every index,
    then ``rewrite`` (expr -> expr) when given."""
    def apply(expr):
        out = expr.xreplace(mapping)
        return rewrite(out) if rewrite is not None else out

    memo: dict[int, Value] = {}
    for v in walk(root):
        kids = [memo[id(c)] for c in v.children]
        if isinstance(v, Load):
            index = apply(v.index)
            memo[id(v)] = Load(v.buffer, index, v.dtype, [(s, k) for (s, _), k in zip(v.indirect, kids)])
        elif isinstance(v, IndexValue):
            memo[id(v)] = IndexValue(apply(v.expr), v.dtype)
        elif isinstance(v, Op):
            memo[id(v)] = Op(v.op, kids, v.dtype)
        elif isinstance(v, Masked):
            memo[id(v)] = Masked(kids[0], kids[1], v.other)
        elif isinstance(v, IndexCheck):
            memo[id(v)] = IndexCheck(kids[0], kids[1], v.error)
        else:
            memo[id(v)] = v
    return memo[id(root)]


def short_dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def format_value(root: Value) -> str:
    """Readable multi-line text: one ``tN = ...`` line per shared or compound value."""
    names: dict[int, str] = {}
    lines: list[str] = []

    def ref(v: Value) -> str:
        return names[id(v)]

    for v in walk(root):
        if isinstance(v, Constant):
            names[id(v)] = repr(v.value)
            continue
        if isinstance(v, Load):
            ind = "".join(f", {s}={ref(c)}" for (s, _), c in zip(v.indirect, v.children))
            text = f"load({v.buffer}, {v.index}{ind})"
        elif isinstance(v, IndexValue):
            text = f"index({v.expr})"
        elif isinstance(v, Op):
            args = ", ".join(ref(c) for c in v.children)
            text = f"{v.op}({args})" if v.op != "cast" else f"cast({args}, {short_dtype(v.dtype)})"
        elif isinstance(v, Masked):
            text = f"masked({ref(v.mask)}, {ref(v.body)}, other={v.other!r})"
        elif isinstance(v, IndexCheck):
            text = f"index_check({ref(v.index)}, {ref(v.size)}, {v.error[0]})"
        else:
            text = v.kind
        name = f"t{len(lines)}"
        names[id(v)] = name
        lines.append(f"{name} = {text}")
    if not lines:
        return names[id(root)]
    return "\n".join(lines)
