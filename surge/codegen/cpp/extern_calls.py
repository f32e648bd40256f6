"""Extern calls of the C++ host code: ATen ops called with as little Python as possible.

A graph at small sizes spends more time in the host code's Python than in its
kernels, so each extern line is written for the cheapest call that runs the
very same ATen overload:

- an overload is called by a name bound once at module level (``codegen/extern_callees.py``);
- ``addmm(bias, x, w.t())`` and ``mm(x, w.t())`` with ``w`` a 2-D tensor the
  host holds are ``torch.nn.functional.linear(x, w[, bias])``, which calls
  exactly those ops on ``w.t()``: no view built in Python;
- views of buffers are plain names where the tensor already has the layout
  (``host_layouts``), ``.t()`` where it is the transpose, ``as_strided`` otherwise;
- an op in ``CONTIGUOUS_RESULTS`` always returns a new contiguous tensor: when the
  traced layout is contiguous too, its result needs no layout check.

tests/backend_cpp/test_host_calls.py checks each table entry against ATen's
dispatcher (the overloads each call reaches), results and errors.
"""
from __future__ import annotations

import torch

from ...lowering.ir import ExternBuffer, Layout, TensorArg
from ..common import format_index
from ..extern_callees import CALLEES_PRELUDE
from ..wrapper import WrapperWriter, python_literal
from .host_layouts import is_transpose, layout_key

aten = torch.ops.aten

# Overloads whose result is always a newly allocated contiguous tensor.
CONTIGUOUS_RESULTS = {aten.mm.default, aten.addmm.default, aten.bmm.default}

BINDINGS_PRELUDE = '''
CPU = torch.device("cpu")
linear = torch._C._nn.linear
''' + CALLEES_PRELUDE


class ExternCalls(WrapperWriter):
    """Extern lines, views and outputs of the C++ host code (``WrapperWriter``'s, made cheaper)."""

    def __init__(self, schedule, layouts: dict):
        super().__init__(schedule, {})
        self.layouts = layouts          # buffer name -> layout of the tensor bound to it

    # -- views -----------------------------------------------------------------
    def held(self, arg: TensorArg) -> Layout:
        return arg.layout or self.by_name[arg.buffer].layout

    def tensor_arg(self, a: TensorArg) -> str:
        want, have = self.held(a), self.layouts[a.buffer]
        if layout_key(want) == layout_key(have):
            return a.buffer
        if is_transpose(want, have):
            return f"{a.buffer}.t()"
        return super().tensor_arg(TensorArg(a.buffer, want))

    def output(self, arg) -> str:
        return self.tensor_arg(arg) if isinstance(arg, TensorArg) else python_literal(arg)

    def transposed_operand(self, a) -> str | None:
        """The name of the 2-D tensor whose ``.t()`` argument ``a`` is, if it is one."""
        if isinstance(a, TensorArg) and is_transpose(self.held(a), self.layouts[a.buffer]):
            return a.buffer
        return None

    # -- callees ---------------------------------------------------------------
    def linear_call(self, buf: ExternBuffer) -> str | None:
        """``linear(x, w[, bias])`` for ``addmm(bias, x, w.t())`` / ``mm(x, w.t())``."""
        if buf.op is aten.addmm.default and len(buf.args) == 3 and all(
                buf.kwargs.get(k, 1) == 1 for k in ("beta", "alpha")) and set(buf.kwargs) <= {"beta", "alpha"}:
            bias, x, w = buf.args
        elif buf.op is aten.mm.default and len(buf.args) == 2 and not buf.kwargs:
            (x, w), bias = buf.args, None
        else:
            return None
        weight = self.transposed_operand(w)
        if weight is None:
            return None
        args = [self.argument(x), weight] + ([self.argument(bias)] if bias is not None else [])
        return f"linear({', '.join(args)})"

    def extern_line(self, buf: ExternBuffer) -> str:
        call = None if buf.parent is not None else self.linear_call(buf)
        if call is None:
            return super().extern_line(buf)
        loc = f"  # {buf.location}" if buf.location else ""
        return f"{buf.name} = {call}{loc}"

    def layout_check(self, buf: ExternBuffer) -> list:
        """An extern op's result may be laid out otherwise than traced (its strides can follow
        its inputs', which the schedule may have realized differently): kernels and views of
        it assume the traced layout. Ops in CONTIGUOUS_RESULTS need no check when the
        traced layout is contiguous."""
        if buf.name in self.tuple_results:
            return []
        lay = buf.layout
        if buf.op in CONTIGUOUS_RESULTS and layout_key(lay) == layout_key(Layout.contiguous(lay.shape)):
            return []
        shape, stride, offset = _shape(lay.shape), _shape(lay.stride), format_index(lay.offset)
        return [f"if {buf.name}.stride() != {stride} or {buf.name}.storage_offset() != {offset}:",
                f"    {buf.name} = restride({buf.name}, {shape}, {stride}, {offset})"]


def _shape(values) -> str:
    return "(" + "".join(f"{format_index(v)}, " for v in values) + ")"
