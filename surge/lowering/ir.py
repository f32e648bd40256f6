"""The loop IR: buffers, the loops that compute them, and extern calls.

A ``LoopGraph`` is what lowering makes of one ATen graph and what the
scheduler and both code generators read. It knows nothing of Triton or C++.

- ``InputBuffer``: a graph input (or a constant attribute of the graph module).
- ``ComputedBuffer``: a loop nest. ``ranges`` are the sizes of its parallel
  loops (index symbols ``i0, i1, ...``); a reduction adds ``reduction_ranges``
  (symbols ``r0, r1, ...``) and a ``reduction_type`` (a kind of reductions.py's
  table). ``value`` computes one
  element (for a reduction: one term of the reduction) and is stored at
  ``store_index``, an expression of the ``i`` symbols over the buffer's layout.
- ``ExternBuffer``: a call to an ATen op (matmul, convolution, anything not
  lowered) on realized buffers; ``output_views`` of a multi-output call select
  its elements.

Every size, stride and index is a sympy expression.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch

from .size_vars import SizeVars
from .sizes import contiguous_strides, index_symbol, product
from .values import Value, format_value, short_dtype


@dataclasses.dataclass(eq=False)
class Layout:
    shape: tuple
    stride: tuple
    offset: sympy.Expr = sympy.Integer(0)

    @staticmethod
    def contiguous(shape) -> "Layout":
        return Layout(tuple(shape), contiguous_strides(shape))

    def index(self, idx) -> sympy.Expr:
        return self.offset + sum((i * s for i, s in zip(idx, self.stride)), sympy.Integer(0))

    def __str__(self) -> str:
        shape = ", ".join(map(str, self.shape))
        stride = ", ".join(map(str, self.stride))
        off = f", offset={self.offset}" if self.offset != 0 else ""
        return f"[{shape}] stride=[{stride}]{off}"


@dataclasses.dataclass(eq=False)
class Buffer:
    name: str
    layout: Layout
    dtype: torch.dtype
    device: torch.device

    @property
    def shape(self) -> tuple:
        return self.layout.shape

    def numel(self) -> sympy.Expr:
        return product(self.layout.shape)

    def describe(self) -> str:
        return f"{self.name}: {short_dtype(self.dtype)}{self.layout}"


@dataclasses.dataclass(eq=False)
class InputBuffer(Buffer):
    position: int = 0

    def __str__(self) -> str:
        return f"{self.describe()} = input {self.position}"


@dataclasses.dataclass(eq=False)
class ComputedBuffer(Buffer):
    ranges: tuple = ()
    value: Value | None = None
    reduction_ranges: tuple = ()
    reduction_type: str | None = None
    # reduction accumulator dtype, and the correction (Bessel) of a "var" reduction
    acc_dtype: torch.dtype | None = None
    correction: float = 0.0
    # the ATen ops this buffer computes, for kernel names
    origins: tuple = ()
    # user file:line of the node, where known
    location: str | None = None

    @property
    def is_reduction(self) -> bool:
        return self.reduction_type is not None

    @property
    def index_vars(self) -> tuple:
        return tuple(index_symbol("i", k) for k in range(len(self.ranges)))

    @property
    def reduction_vars(self) -> tuple:
        return tuple(index_symbol("r", k) for k in range(len(self.reduction_ranges)))

    # dims of the layout that the loops cover (size-1 dims are index 0)
    loop_dims: tuple = ()

    def store_index(self) -> sympy.Expr:
        full = [sympy.Integer(0)] * len(self.layout.shape)
        for var, dim in zip(self.index_vars, self.loop_dims):
            full[dim] = var
        return self.layout.index(full)

    def __str__(self) -> str:
        loops = ", ".join(f"{v} < {s}" for v, s in zip(self.index_vars, self.ranges))
        head = f"{self.describe()} = "
        if self.is_reduction:
            red = ", ".join(f"{v} < {s}" for v, s in zip(self.reduction_vars, self.reduction_ranges))
            head += f"reduction[{self.reduction_type}]({loops} | {red})"
        else:
            head += f"pointwise({loops})"
        body = format_value(self.value).replace("\n", "\n    ")
        return f"{head} at {self.store_index()}:\n    {body}"


@dataclasses.dataclass(eq=False)
class ScatterBuffer(ComputedBuffer):
    """``into`` with some elements replaced: for each point of ``ranges``, ``value`` is
    stored at ``target`` of ``into``'s layout, in ``into``'s storage (the other elements
    keep ``into``'s values). ``target`` is an expression of the loop symbols and of the
    ``indirect`` symbols, each bound to an index value (``x[idx] = v``); a target that an
    index value puts outside the tensor is not written (``value`` is then a ``Masked``
    whose mask says where the indices are in range).

    The storage is shared, so ``into`` is a buffer nothing else reads or writes (lowering
    makes it as a copy for this scatter alone); the schedule may give the scatter the
    storage of what ``into`` copies instead (``schedule/scatter_stores.py``)."""
    into: str = ""
    target: sympy.Expr = sympy.Integer(0)
    indirect: tuple = ()

    def store_index(self) -> sympy.Expr:
        return self.target

    def __str__(self) -> str:
        loops = ", ".join(f"{v} < {s}" for v, s in zip(self.index_vars, self.ranges))
        ind = "".join(f", {s}={format_value(v)}" for s, v in self.indirect)
        body = format_value(self.value).replace("\n", "\n    ")
        return f"{self.describe()} = scatter into {self.into}({loops}) at {self.target}{ind}:\n    {body}"


@dataclasses.dataclass(eq=False)
class ExternBuffer(Buffer):
    """``op(*args, **kwargs)``; tensor arguments are ``TensorArg``s of realized buffers."""
    op: Any = None
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    # for an op returning several tensors: this buffer is element ``output_index``
    # of ``parent``'s result (a buffer with no storage of its own)
    parent: str | None = None
    output_index: int | None = None
    location: str | None = None

    def __str__(self) -> str:
        if self.parent is not None:
            return f"{self.describe()} = {self.parent}[{self.output_index}]"
        args = ", ".join(map(str, self.args))
        kw = "".join(f", {k}={v}" for k, v in self.kwargs.items())
        return f"{self.describe()} = extern {self.op}({args}{kw})"


@dataclasses.dataclass(frozen=True)
class ExternResult:
    """The one tensor a lowering rule's extern call returns, given as a layout of size
    expressions: for a call on other sizes than traced when the sizes are symbolic (a
    meta run, ``result_meta``'s other form, needs numbers)."""
    layout: "Layout"
    dtype: torch.dtype


@dataclasses.dataclass(eq=False)
class TensorArg:
    """A realized buffer viewed with ``layout`` (its own when ``layout`` is None)."""
    buffer: str
    layout: Layout | None = None

    def __str__(self) -> str:
        return self.buffer if self.layout is None else f"view({self.buffer}, {self.layout})"


@dataclasses.dataclass(eq=False)
class GraphOutput:
    """One returned value: a view of a buffer, or a Python constant."""
    arg: Any

    def __str__(self) -> str:
        return str(self.arg)


@dataclasses.dataclass(eq=False)
class SizeInput:
    """A graph input that is a size (a SymInt placeholder): ``expr`` over the size symbols,
    at ``position`` among the call's arguments."""
    name: str
    expr: sympy.Expr
    position: int

    def __str__(self) -> str:
        return f"{self.name}: size {self.expr} = input {self.position}"


@dataclasses.dataclass(eq=False)
class LoopGraph:
    inputs: list            # InputBuffer, in call order
    buffers: list           # ComputedBuffer / ExternBuffer, in a valid execution order
    outputs: list           # GraphOutput
    device: torch.device
    # the graph returns one value rather than a tuple of them
    single_output: bool = False
    # the size symbols, their hints and the guards lowering recorded
    sizes: SizeVars = dataclasses.field(default_factory=SizeVars)
    size_inputs: list = dataclasses.field(default_factory=list)   # SizeInput, in call order
    # what the code generator decides (surge/target.py): the schedule reads it from here
    target: object = None

    def buffer(self, name: str) -> Buffer:
        return self.by_name[name]

    @property
    def by_name(self) -> dict:
        return {b.name: b for b in self.inputs + self.buffers}

    def __str__(self) -> str:
        parts = [str(b) for b in self.size_inputs + self.inputs + self.buffers]
        if self.sizes.symbols:
            parts.insert(0, self.sizes.describe())
        parts.append("return " + ", ".join(map(str, self.outputs)))
        return "\n".join(parts)
