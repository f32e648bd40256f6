"""Lowerings of scatters: a tensor with some of its elements replaced.

``index_put`` (``x[idx] = v``, ``index_copy``), ``scatter`` and the view scatters that
functionalization writes for a mutated view (``slice_scatter``, ``select_scatter``) of a
tensor in memory become a copy of that tensor and a ``ScatterBuffer`` that stores the
new elements into the copy: a loop over the new elements only. The schedule drops the
copy where the scatter may write into the tensor itself (a buffer updated in place, a
value nothing reads afterwards: ``schedule/scatter_stores.py``), so a KV-cache update
writes one row and moves nothing else.

A view scatter of a lazy value (the gradient of a slice: zeros with the slice's gradient
in place) stays one pointwise value, which fuses with what computes it.

An index value is taken as eager's op takes it (``IndexRule``: negative from the end for
``index_put``, out of range for ``scatter``); one out of range is stored nowhere, and the
kernel reports it so that the host code raises what eager raises. Duplicate indices store one of their values, as
eager leaves unspecified. Scatters that add (``accumulate=True``, ``scatter_add``,
``index_add``) and reducing scatters stay ATen calls. ``as_strided_scatter`` is lowered where its window is
every element of its base in order (autograd's gradient of a view that covers its base);
other windows stay ATen calls.
"""
from __future__ import annotations

import sympy
import torch

from .ops_index import (ADVANCED_INDEXING, COUNTED_FROM_ZERO, COUNTED_FROM_ZERO_RUNTIME, advanced_indexing,
                        index_checker, index_tensor, indirect_symbol, size_value)
from .ops_pointwise import broadcast_loader
from .ops_view import _norm_dim, _select_index, index_at_least, index_less, slice_bounds, view
from .registry import NotLowered, register_lowering
from .sizes import contiguous_strides, index_symbol, product, sym
from .tensor import LazyTensor
from .values import Constant, IndexValue, Masked, Op, cast

aten = torch.ops.aten


def _in_range(v, size):
    """``0 <= v < size`` for a wrapped index value ``v``."""
    return Op("logical_and", [Op("ge", [v, Constant(0, torch.int64)], torch.bool),
                              Op("lt", [v, size_value(size)], torch.bool)], torch.bool)


def scatter_into(ctx, base: LazyTensor, shape, element, per_dim, check=None) -> LazyTensor:
    """``base`` with, for each ``idx`` of ``shape``, the element at ``per_dim(idx)`` set to
    ``element(idx)``; ``per_dim`` gives per dim of ``base`` an index expression or an
    index value (a tensor's element, taken and checked by ``check``: ``index_checker``)."""
    into = ctx.copy_to_scatter_into(base)
    layout = into.view[1]
    loop_dims = [d for d, s in enumerate(shape) if s != 1]
    idx = [sympy.Integer(0)] * len(shape)
    for k, d in enumerate(loop_dims):
        idx[d] = index_symbol("i", k)
    position, indirect, checks = [], [], []
    for d, entry in enumerate(per_dim(idx)):
        if isinstance(entry, sympy.Basic):
            position.append(entry)
            continue
        symbol = indirect_symbol()
        checked = check(entry, base.shape[d], d)
        indirect.append((symbol, checked))
        checks.append(_in_range(checked.index, base.shape[d]))
        position.append(symbol)
    value = cast(element(idx), base.dtype)
    if checks:
        valid = checks[0]
        for c in checks[1:]:
            valid = Op("logical_and", [valid, c], torch.bool)
        value = Masked(valid, value, 0)
    return ctx.scatter(into, shape, value, layout.index(position), indirect)


@register_lowering(aten.index_put.default)
def index_put(ctx, x, indices, values, accumulate=False):
    if accumulate:
        raise NotLowered("index_put that adds (accumulate=True)")
    if not isinstance(values, LazyTensor) or x.ndim == 0:
        raise NotLowered("index_put of a 0-dim tensor")
    shape, per_dim = advanced_indexing(x, list(indices))
    if values.ndim > len(shape):
        raise NotLowered("index_put values of more dims than the indexed elements")
    load = broadcast_loader(values, shape)
    return scatter_into(ctx, x, shape, load, per_dim, index_checker(ctx, ADVANCED_INDEXING))


@register_lowering(aten.index_copy.default)
def index_copy(ctx, x, dim, index_t, source):
    """``x`` with ``x.select(dim, index[k])`` set to ``source.select(dim, k)``."""
    index_tensor(index_t)
    if x.ndim == 0 or not isinstance(source, LazyTensor) or source.ndim != x.ndim or index_t.ndim > 1:
        raise NotLowered("index_copy of a 0-dim tensor")
    dim = _norm_dim(dim, x.ndim)

    def per_dim(idx):
        out = list(idx)
        out[dim] = index_t.load([idx[dim]] if index_t.ndim else [])
        return out
    return scatter_into(ctx, x, source.shape, source.load, per_dim, index_checker(ctx, COUNTED_FROM_ZERO))


@register_lowering(aten.scatter.src, aten.scatter.value)
def scatter(ctx, x, dim, index_t, src):
    if not isinstance(index_t, LazyTensor) or index_t.dtype != torch.int64 or x.ndim == 0:
        raise NotLowered("scatter of a 0-dim tensor")
    if index_t.ndim != x.ndim:
        raise NotLowered("scatter with an index of other rank")
    dim = _norm_dim(dim, x.ndim)

    def per_dim(idx):
        out = list(idx)
        out[dim] = index_t.load(idx)
        return out
    if isinstance(src, LazyTensor):
        element = src.load
    else:
        fill = Constant(src, x.dtype)
        element = lambda idx: fill   # noqa: E731
    return scatter_into(ctx, x, index_t.shape, element, per_dim, index_checker(ctx, COUNTED_FROM_ZERO_RUNTIME))


@register_lowering(aten.slice_scatter)
def slice_scatter(ctx, base, src, dim=0, start=None, end=None, step=1):
    """``base`` with ``src`` written over ``base[start:end:step]`` along ``dim``: a scatter
    when ``base`` is in memory, else one pointwise value (a gradient of a slice is zeros with
    the slice's gradient in place; both fuse)."""
    if not isinstance(base, LazyTensor) or not isinstance(src, LazyTensor):
        raise NotLowered("non-tensor slice_scatter")
    dim = _norm_dim(dim, base.ndim)
    size = base.shape[dim]
    begin, stop, _ = slice_bounds(ctx.sizes, size, start, end, step)
    if base.view is not None:
        def per_dim(idx):
            out = list(idx)
            out[dim] = begin + step * idx[dim]
            return out
        return scatter_into(ctx, base, src.shape, src.load, per_dim)
    if step != 1:
        raise NotLowered("strided slice_scatter of a lazy value")
    dtype = base.dtype

    def load(idx):
        pos = idx[dim]
        conds = ([index_at_least(pos, begin)] if begin != 0 else []) + \
                ([index_less(pos, stop)] if not ctx.sizes.known_equal(stop, size) else [])
        inner = list(idx)
        inner[dim] = pos - begin
        if not conds:   # the slice covers the whole dim
            return cast(src.load(inner), dtype)
        cond = conds[0] if len(conds) == 1 else Op("logical_and", conds, torch.bool)
        return Op("where", [cond, Masked(cond, cast(src.load(inner), dtype), 0), base.load(list(idx))], dtype)
    return LazyTensor(base.shape, dtype, ctx.device, loader=load)


@register_lowering(aten.as_strided_scatter)
def as_strided_scatter(ctx, base, src, size, stride, storage_offset=None):
    """``base`` with ``src`` written over ``base.as_strided(size, stride, storage_offset)``
    (offsets from the storage's start, as traced). Where the window is every element of a
    row-major ``base`` in row-major order (the gradient of a flatten or a squeeze: zeros with
    the whole gradient scattered over them), the result is ``src`` in ``base``'s shape,
    which fuses; no copy of ``base``."""
    traced = ctx.node.args[0].meta.get("val")
    if not isinstance(base, LazyTensor) or not isinstance(src, LazyTensor) or traced is None:
        raise NotLowered("as_strided_scatter of a value not traced")
    shape = [sym(n) for n in size]
    covers = (traced.storage_offset() == 0 and traced.is_contiguous() and (storage_offset or 0) == 0
              and ctx.sizes.known_equal(product(shape), product(base.shape))
              and all(ctx.sizes.known_equal(sym(a), b) for a, b in zip(stride, contiguous_strides(shape)))
              and len(stride) == len(shape))
    if not covers:
        raise NotLowered("as_strided_scatter over part of its base")
    whole = view(ctx, src, list(base.shape))
    if whole.dtype == base.dtype:
        return whole
    return LazyTensor(base.shape, base.dtype, ctx.device, loader=lambda idx: cast(whole.load(idx), base.dtype))


@register_lowering(aten.select_scatter)
def select_scatter(ctx, base, src, dim, index):
    """``base`` with ``src`` written over ``base.select(dim, index)``: a scatter when
    ``base`` is in memory, else one pointwise value."""
    if not isinstance(base, LazyTensor) or not isinstance(src, LazyTensor):
        raise NotLowered("non-tensor select_scatter")
    dim = _norm_dim(dim, base.ndim)
    index = _select_index(base.shape[dim], index)
    if base.view is not None:
        return scatter_into(ctx, base, src.shape, src.load, lambda idx: list(idx[:dim]) + [index] + list(idx[dim:]))
    dtype = base.dtype

    def load(idx):
        cond = Op("eq", [IndexValue(sympy.expand(idx[dim] - index)), Constant(0, torch.int64)], torch.bool)
        inner = list(idx[:dim]) + list(idx[dim + 1:])
        return Op("where", [cond, Masked(cond, cast(src.load(inner), dtype), 0), base.load(list(idx))], dtype)
    return LazyTensor(base.shape, dtype, ctx.device, loader=load)
