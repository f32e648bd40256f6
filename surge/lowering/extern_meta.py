"""The layout of an extern call's result, for its arguments as lowering realized them.

Tracing recorded each node's result (``meta["val"]``) for the arguments as eager
laid them out. Lowering may lay an argument out otherwise: a pointwise value
that eager kept transposed is realized contiguous, a view becomes a strided
``TensorArg``. Many ATen ops choose their output strides from their inputs'
(sort, topk, cumsum, attention kernels that follow the query's layout), so the
traced strides are only a guess of what the call will return. Kernels read the
result through its layout, so it must be the real one: the op is run again on
meta tensors with the realized layouts, and that result is what the loop IR
records. The host wrapper still checks each result's strides at run time.

With symbolic sizes the meta run takes the sizes' hints, and each result's layout
is written back over the traced (symbolic) shape: its dims in the order their
strides have at the hints, each stride the product of the sizes inside it. That is
the layout at the hints, and a guess for other sizes, as the traced layout is one
for other arguments: where a call returns something else, the run-time check
copies it into the recorded layout (a copy, never a wrong read).
"""
from __future__ import annotations

import sympy
import torch

from ..aot.device_layouts import device_result
from .ir import ExternResult, Layout, TensorArg


def _meta_tensor(arg: TensorArg, by_name: dict, sizes) -> torch.Tensor:
    """A meta tensor of ``arg``'s layout at the sizes' hints."""
    buf = by_name[arg.buffer]
    layout = arg.layout or buf.layout
    shape = tuple(sizes.hint(s) for s in layout.shape)
    stride = tuple(sizes.hint(s) for s in layout.stride)
    offset = sizes.hint(layout.offset)
    extent = offset + 1 + sum((sz - 1) * st for sz, st in zip(shape, stride) if sz > 0)
    if any(sz == 0 for sz in shape):
        extent = offset
    base = torch.empty(max(extent, 1), dtype=buf.dtype, device="meta")
    return base.as_strided(shape, stride, offset)


def _to_meta(value, by_name: dict, sizes):
    if isinstance(value, TensorArg):
        return _meta_tensor(value, by_name, sizes)
    if isinstance(value, torch.device):
        return torch.device("meta")
    if isinstance(value, sympy.Basic):   # a size the op takes (a view's shape): its hint
        return sizes.hint(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(v, by_name, sizes) for v in value)
    return value


def _layout_key(layout: Layout, sizes) -> tuple:
    return (tuple(sizes.simplify(v) for v in layout.shape), tuple(sizes.simplify(v) for v in layout.stride),
            sizes.simplify(layout.offset))


def _traced_layout(t: torch.Tensor, sizes) -> Layout:
    return Layout(sizes.shape(t.shape), sizes.shape(t.stride()), sizes.expr(t.storage_offset()))


def _traced_args(node) -> list:
    """The traced tensor arguments of ``node``, in the order ``_realized_args`` lists them."""
    out = []

    def visit(a):
        if isinstance(a, torch.fx.Node):
            val = a.meta.get("val", a.meta.get("example_value"))
            out.append(val if isinstance(val, torch.Tensor) else None)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
    visit(list(node.args) + list(node.kwargs.values()))
    return out


def _realized_args(args, kwargs, by_name) -> list:
    """The layouts of the tensor arguments as lowering realized them."""
    out = []

    def visit(a):
        if isinstance(a, TensorArg):
            out.append(a.layout or by_name[a.buffer].layout)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
    visit(list(args) + list(kwargs.values()))
    return out


def _same_structure(new, traced, sizes) -> bool:
    """Same kinds, shapes (``traced``'s at the hints) and dtypes element by element (only
    strides may differ)."""
    if isinstance(traced, torch.Tensor):
        return (isinstance(new, torch.Tensor) and new.dtype == traced.dtype and new.dim() == traced.dim()
                and all(n == sizes.hint(t) for n, t in zip(new.shape, traced.shape)))
    if isinstance(traced, (list, tuple)):
        return (isinstance(new, (list, tuple)) and len(new) == len(traced)
                and all(_same_structure(n, t, sizes) or t is None for n, t in zip(new, traced)))
    return True


def _merge(new, traced):
    """``new``'s tensors where tracing had tensors; tracing's own scalars and Nones."""
    if isinstance(traced, (list, tuple)):
        return type(traced)(_merge(n, t) for n, t in zip(new, traced))
    return new if isinstance(traced, torch.Tensor) else traced


def _static(layouts, sizes) -> bool:
    return all(sizes.is_static(v) for lay in layouts for v in (*lay.shape, *lay.stride, lay.offset))


def _symbolic_result(new, traced, sizes):
    """The meta run's results (``new``, at the hints) over ``traced``'s symbolic shapes: an
    ``ExternResult`` per tensor whose layout is dense and starts its storage, else the
    traced tensor (its layout stays the guess)."""
    if isinstance(traced, (list, tuple)):
        return type(traced)(_symbolic_result(n, t, sizes) for n, t in zip(new, traced))
    if not isinstance(traced, torch.Tensor) or new.storage_offset() != 0:
        return traced
    shape = sizes.shape(traced.shape)
    hints, strides = tuple(new.shape), tuple(new.stride())
    # innermost first; a size-1 dim before the dim whose stride it shares
    order = sorted(range(new.dim()), key=lambda d: (strides[d], hints[d] != 1))
    symbolic, inside = [sympy.Integer(0)] * new.dim(), sympy.Integer(1)
    for d in order:
        symbolic[d] = sympy.expand(inside)
        inside = inside * shape[d]
    if tuple(sizes.hint(s) for s in symbolic) != strides:   # not dense at the hints
        return traced
    return ExternResult(Layout(shape, tuple(symbolic)), new.dtype)


def extern_result_meta(target, args, kwargs, by_name: dict, node, traced, sizes):
    """The result of ``target(*args, **kwargs)`` as meta tensors with its real layouts, or,
    over symbolic sizes, as ``ExternResult`` layouts (see the module's docstring).

    When every tensor argument is laid out as traced, the traced result is the
    answer. Otherwise the op runs on meta tensors of the realized layouts; an op
    that cannot run on meta (or disagrees with tracing on anything but strides)
    keeps the traced result, which the wrapper's run-time check then guards.
    """
    if node is None or traced is None:
        return traced
    realized = _realized_args(args, kwargs, by_name)
    before = _traced_args(node)
    if len(realized) == len(before) and all(
            b is not None and _layout_key(r, sizes) == _layout_key(_traced_layout(b, sizes), sizes)
            for r, b in zip(realized, before)):
        return traced
    if not isinstance(target, torch._ops.OpOverload):
        return traced
    try:
        with torch.no_grad():
            meta_args, meta_kwargs = _to_meta(args, by_name, sizes), _to_meta(kwargs, by_name, sizes)
            new = device_result(target, meta_args, meta_kwargs, target(*meta_args, **meta_kwargs),
                                node.meta.get("device"))
    except Exception:   # no meta kernel, or one that needs data: the traced layout stands
        return traced
    if not _same_structure(new, traced, sizes):
        return traced
    if _static(realized, sizes) and not _symbolic_shapes(traced, sizes):
        return _merge(new, traced)
    return _symbolic_result(new, traced, sizes)


def _symbolic_shapes(traced, sizes) -> bool:
    """Whether some tensor of ``traced`` has a symbolic size (its meta run had numbers)."""
    if isinstance(traced, (list, tuple)):
        return any(_symbolic_shapes(t, sizes) for t in traced)
    return isinstance(traced, torch.Tensor) and not all(sizes.is_static(s) for s in traced.shape)
