"""Lowerings of views and data movement: index remapping, never a copy.

A view of a strided buffer stays a strided view (a new layout of the same
buffer), so extern calls can take it as it is; a view of a lazy value remaps
indices in its loader. cat and pad select among inputs with masked loads.
"""
from __future__ import annotations

import sympy
import torch

from .ir import Layout
from .registry import NotLowered, register_lowering
from .size_vars import static_int
from .sizes import FloorDiv, Mod, contiguous_strides, decompose, product, sym
from .tensor import LazyTensor
from .values import Constant, IndexValue, Masked, Op, cast

aten = torch.ops.aten


def _layout(t: LazyTensor) -> Layout | None:
    return t.view[1] if t.view is not None else None


def _norm_dim(d, ndim):
    return d % max(ndim, 1)


@register_lowering(aten.permute)
def permute(ctx, x, dims):
    dims = [_norm_dim(d, x.ndim) for d in dims]
    shape = tuple(x.shape[d] for d in dims)
    lay = _layout(x)
    new = Layout(shape, tuple(lay.stride[d] for d in dims), lay.offset) if lay else None

    def remap(idx):
        out = [None] * x.ndim
        for k, d in enumerate(dims):
            out[d] = idx[k]
        return out
    return x.with_view(shape, new, remap)


@register_lowering(aten.t, aten.numpy_T)
def t_(ctx, x):
    return permute(ctx, x, list(reversed(range(x.ndim))))


@register_lowering(aten.transpose.int)
def transpose(ctx, x, a, b):
    dims = list(range(x.ndim))
    a, b = _norm_dim(a, x.ndim), _norm_dim(b, x.ndim)
    dims[a], dims[b] = dims[b], dims[a]
    return permute(ctx, x, dims)


@register_lowering(aten.expand)
def expand(ctx, x, size, implicit=False):
    lead = len(size) - x.ndim
    shape = tuple(x.shape[k - lead] if (s == -1) else sym(s) for k, s in enumerate(size))
    lay = _layout(x)
    new = None
    if lay:
        stride = [sympy.Integer(0)] * lead + [
            sympy.Integer(0) if x.shape[k] == 1 and shape[lead + k] != 1 else lay.stride[k]
            for k in range(x.ndim)]
        new = Layout(shape, tuple(stride), lay.offset)

    def remap(idx):
        return [sympy.Integer(0) if x.shape[k] == 1 else idx[lead + k] for k in range(x.ndim)]
    return x.with_view(shape, new, remap)


@register_lowering(aten.unsqueeze)
def unsqueeze(ctx, x, dim):
    dim = dim % (x.ndim + 1)
    shape = x.shape[:dim] + (sympy.Integer(1),) + x.shape[dim:]
    lay = _layout(x)
    new = Layout(shape, lay.stride[:dim] + (sympy.Integer(1),) + lay.stride[dim:], lay.offset) if lay else None
    return x.with_view(shape, new, lambda idx: idx[:dim] + idx[dim + 1:])


@register_lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def squeeze(ctx, x, dims=None):
    if dims is None:
        dims = range(x.ndim)
    elif isinstance(dims, int):
        dims = [dims]
    drop = {_norm_dim(d, x.ndim) for d in dims if x.shape[_norm_dim(d, x.ndim)] == 1}
    keep = [d for d in range(x.ndim) if d not in drop]
    shape = tuple(x.shape[d] for d in keep)
    lay = _layout(x)
    new = Layout(shape, tuple(lay.stride[d] for d in keep), lay.offset) if lay else None

    def remap(idx):
        out = [sympy.Integer(0)] * x.ndim
        for k, d in enumerate(keep):
            out[d] = idx[k]
        return out
    return x.with_view(shape, new, remap)


@register_lowering(aten.view, aten.reshape, aten._unsafe_view, aten.view_copy)
def view(ctx, x, size):
    size = list(size)
    numel = product(x.shape)
    if -1 in size:
        size[size.index(-1)] = _quotient(numel, product(sym(s) for s in size if s != -1))
    shape = tuple(sym(s) for s in size)
    lay = _layout(x)
    new = None
    if lay is not None and _is_contiguous(lay):
        new = Layout(shape, contiguous_strides(shape), lay.offset)
    elif lay is not None:
        strides = view_strides(ctx.sizes, lay.shape, lay.stride, shape)
        if strides is not None:
            new = Layout(shape, strides, lay.offset)

    def remap(idx):
        linear = sum((i * s for i, s in zip(idx, contiguous_strides(shape))), sympy.Integer(0))
        return decompose(linear, x.shape)
    if new is None and lay is not None and tuple(s for s in shape if s != 1) == tuple(s for s in x.shape if s != 1):
        # only size-1 dims change: keep strided
        return _reshape_ones(x, shape)
    return x.with_view(shape, new, remap)


def _quotient(numel, known):
    """The size a view's ``-1`` stands for: ``numel / known``, which tracing checked to be a
    whole number. A product of sizes over a product of some of them cancels to a polynomial
    (``128*s0 / 64`` is ``2*s0``); anything else stays a floor division, exact by that check."""
    if numel.is_Integer and known.is_Integer:
        return sympy.Integer(int(numel) // int(known))
    quotient = sympy.expand(numel / known)
    if all(t.as_coeff_Mul()[0].is_Integer and not any(f.is_Pow and f.exp < 0 for f in sympy.Mul.make_args(t))
           for t in sympy.Add.make_args(quotient)):
        return quotient
    return FloorDiv(numel, known)


def view_strides(sizes, old_shape, old_stride, new_shape):
    """Strides that view a strided tensor as ``new_shape`` without a copy, for every size in
    range (``sizes``, the graph's ``SizeVars``), or None.

    Walks the old dims from the innermost in chunks that are contiguous with each
    other (each dim's stride the next one's extent); the new dims must split those
    chunks exactly. Symbolic sizes take part through facts that hold for all of them:
    a chunk continues only where its strides are known to line up, and the new dims
    that split it must multiply to its extent; where that is not known, no view."""
    if not old_shape or any(sizes.known_equal(s, 0) for s in old_shape):
        return None
    one = [sizes.known_equal(s, 1) for s in old_shape]
    new_stride = [sympy.Integer(0)] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_stride, chunk_numel, view_numel = old_stride[-1], sympy.Integer(1), sympy.Integer(1)
    for d in range(len(old_shape) - 1, -1, -1):
        chunk_numel = chunk_numel * old_shape[d]
        chunk_ends = d == 0 or not (one[d - 1] or sizes.known_equal(old_stride[d - 1], chunk_numel * chunk_stride))
        if not chunk_ends:
            continue
        # new dims join the chunk until their extent is its extent (sizes are at least 1, so
        # one past it never comes back to it: the check below then fails)
        while view_d >= 0 and (not sizes.known_equal(view_numel, chunk_numel) or sizes.known_equal(new_shape[view_d], 1)):
            new_stride[view_d] = sympy.expand(view_numel * chunk_stride)
            view_numel = view_numel * new_shape[view_d]
            view_d -= 1
        if not sizes.known_equal(view_numel, chunk_numel):
            return None
        if d > 0:
            chunk_stride, chunk_numel, view_numel = old_stride[d - 1], sympy.Integer(1), sympy.Integer(1)
    if view_d != -1:
        return None
    return tuple(new_stride)


def _reshape_ones(x, shape):
    lay = _layout(x)
    strides = iter([st for s, st in zip(x.shape, lay.stride) if s != 1])
    new_stride = tuple(next(strides) if s != 1 else sympy.Integer(1) for s in shape)
    inner = [d for d, s in enumerate(x.shape) if s != 1]

    def remap(idx):
        vals = [i for i, s in zip(idx, shape) if s != 1]
        out = [sympy.Integer(0)] * x.ndim
        for d, v in zip(inner, vals):
            out[d] = v
        return out
    return x.with_view(shape, Layout(shape, new_stride, lay.offset), remap)


def _is_contiguous(lay: Layout) -> bool:
    want = contiguous_strides(lay.shape)
    return all(s == 1 or a == b for s, a, b in zip(lay.shape, lay.stride, want))


# A slice bound at least this large means "to the end" (Python's slices take sys.maxsize).
_TO_THE_END = 2**62


def slice_bounds(sizes, size, start, end, step: int = 1) -> tuple:
    """(start, end, length) of ``[start:end:step]`` over a dim of ``size``, as Python's
    slices clamp them; with a symbolic size, each clamp that depends on it is a guard."""
    static = sizes.static(size)
    symbolic_bounds = any(isinstance(v, sympy.Basic) and not v.is_Integer for v in (start, end))
    if static is not None and not symbolic_bounds:
        begin, stop, _ = slice(start, end, step).indices(static)
        return sympy.Integer(begin), sympy.Integer(stop), sympy.Integer(max(0, -(-(stop - begin) // step)))

    def clamp(v, default):
        if v is None:
            return default
        if isinstance(v, sympy.Basic) and not v.is_Integer:   # a bound that is itself a size
            return v if sizes.guard_leq(v, size) else size
        if v >= _TO_THE_END:
            return size
        v = sympy.Integer(v)
        if v < 0:
            v = size + v
            return sympy.Integer(0) if sizes.guard_lt(v, 0) else v
        return v if sizes.guard_leq(v, size) else size
    begin, stop = clamp(start, sympy.Integer(0)), clamp(end, size)
    if sizes.guard_leq(stop, begin):
        return begin, stop, sympy.Integer(0)
    return begin, stop, sympy.expand(stop - begin) if step == 1 else FloorDiv(stop - begin + step - 1, step)


@register_lowering(aten.slice.Tensor)
def slice_(ctx, x, dim=0, start=None, end=None, step=1):
    dim = _norm_dim(dim, x.ndim)
    start, end, length = slice_bounds(ctx.sizes, x.shape[dim], start, end, step)
    shape = x.shape[:dim] + (length,) + x.shape[dim + 1:]
    lay = _layout(x)
    new = None
    if lay:
        stride = list(lay.stride)
        stride[dim] = stride[dim] * step
        new = Layout(shape, tuple(stride), lay.offset + lay.stride[dim] * start)

    def remap(idx):
        out = list(idx)
        out[dim] = idx[dim] * step + start
        return out
    return x.with_view(shape, new, remap)


@register_lowering(aten.select.int)
def select(ctx, x, dim, index):
    dim = _norm_dim(dim, x.ndim)
    index = _select_index(x.shape[dim], index)
    shape = x.shape[:dim] + x.shape[dim + 1:]
    lay = _layout(x)
    new = Layout(shape, lay.stride[:dim] + lay.stride[dim + 1:], lay.offset + lay.stride[dim] * index) if lay else None
    return x.with_view(shape, new, lambda idx: idx[:dim] + [sympy.Integer(index)] + idx[dim:])


@register_lowering(aten.as_strided)
def as_strided(ctx, x, size, stride, storage_offset=None):
    """A strided view of ``x``'s buffer. The graph's offset counts in the storage ``x``
    had when traced; ``x``'s buffer may hold it elsewhere (realized on its own, or an
    input that starts inside its storage), so positions are rebased: traced position
    ``p`` of an element of ``x`` is buffer position ``p - traced offset + layout offset``."""
    from .lower import LoweringError

    traced = ctx.node.args[0].meta.get("val")
    if not isinstance(traced, torch.Tensor):
        raise NotLowered("as_strided of an input without traced metadata")
    sizes = ctx.sizes
    traced_stride = sizes.shape(traced.stride())
    lay = _layout(x)
    if lay is None or len(lay.stride) != len(traced_stride) or not all(
            sizes.known_equal(a, b) for a, b in zip(lay.stride, traced_stride)):
        if not sizes.known_dense(x.shape, traced_stride):
            raise LoweringError(f"as_strided of a value traced with overlapping strides {traced.stride()}")
        lay = Layout(x.shape, traced_stride, sym(0))
        x = ctx.realize(x, lay)
    shape = sizes.shape(size)
    new = Layout(shape, sizes.shape(stride),
                 sympy.expand(sizes.expr(storage_offset or 0) - sizes.expr(traced.storage_offset()) + lay.offset))
    (low, high), (new_low, new_high) = _span(lay), _span(new)
    if not (sizes.known_leq(low, new_low) and sizes.known_leq(new_high, high)):
        # it reads storage around x that x's buffer does not hold
        raise LoweringError("as_strided reaching outside its input's elements")
    return x.with_view(shape, new, None)


def _select_index(size, index: int):
    """Position ``index`` of a dim of ``size`` (negative ones count from its end)."""
    return sympy.Integer(index) if index >= 0 else sympy.expand(size + index)


def _span(lay: Layout) -> tuple:
    """(lowest, highest) storage positions a layout reaches."""
    low = high = lay.offset
    for size, st in zip(lay.shape, lay.stride):
        reach = (size - 1) * st
        low, high = (low + reach, high) if st.is_negative else (low, high + reach)
    return sympy.expand(low), sympy.expand(high)


@register_lowering(aten.flip)
def flip(ctx, x, dims):
    dims = {_norm_dim(d, x.ndim) for d in dims}

    def remap(idx):
        return [x.shape[d] - 1 - i if d in dims else i for d, i in enumerate(idx)]
    return x.with_view(x.shape, None, remap)


@register_lowering(aten.roll)
def roll(ctx, x, shifts, dims=()):
    """``x`` rotated by ``shifts`` along ``dims``: element ``i`` of a rolled dim of size ``n``
    is element ``(i - shift) mod n`` of ``x``, an index remap that fuses (a shifted-window
    attention rolls its activations before and after every other block)."""
    shifts, dims = list(shifts), list(dims)
    if not dims or len(shifts) != len(dims):
        raise NotLowered("roll over the flattened tensor")
    by_dim = {}
    for shift, d in zip(shifts, dims):
        d = _norm_dim(d, x.ndim)
        size = x.shape[d]
        if not size.is_Integer:
            raise NotLowered("roll along a symbolic size")
        by_dim[d] = (by_dim.get(d, 0) + int(shift)) % int(size)

    def remap(idx):
        # (i - shift) mod n, kept non-negative: i + (n - shift) is, for 0 <= shift < n
        return [Mod(i + (x.shape[d] - by_dim[d]), x.shape[d]) if by_dim.get(d) else i for d, i in enumerate(idx)]
    return x.with_view(x.shape, None, remap)


@register_lowering(aten.repeat)
def repeat(ctx, x, repeats):
    lead = len(repeats) - x.ndim
    shape = tuple(sym(r) * (x.shape[k - lead] if k >= lead else 1) for k, r in enumerate(repeats))

    def remap(idx):
        return [Mod(idx[lead + k], x.shape[k]) for k in range(x.ndim)]
    return x.with_view(shape, None, remap)


def _compare(op: str, expr, bound):
    bound = sym(bound)
    if bound.is_Integer:
        return Op(op, [IndexValue(expr), Constant(static_int(bound), torch.int64)], torch.bool)
    # a bound that is a size: the difference of two index expressions against 0
    return Op(op, [IndexValue(sympy.expand(expr - bound)), Constant(0, torch.int64)], torch.bool)


def index_less(expr, bound):
    return _compare("lt", expr, bound)


def index_at_least(expr, bound):
    return _compare("ge", expr, bound)


@register_lowering(aten.cat)
def cat(ctx, tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if any(not isinstance(t, LazyTensor) for t in tensors):
        raise NotLowered("cat of non-tensors")
    dim = _norm_dim(dim, tensors[0].ndim)
    dtype = ctx.out_dtype()
    shape = ctx.sizes.shape(ctx.out_meta.shape)
    pieces, start = [], sympy.Integer(0)
    for t in tensors:
        n = t.shape[dim]
        if n != 0:
            pieces.append((start, n, t))
        start = start + n

    def load(idx):
        pos = idx[dim]
        result = None
        for begin, n, t in reversed(pieces):
            inner = list(idx)
            inner[dim] = pos - begin
            value = cast(t.load(inner), dtype)
            if result is None:
                if len(pieces) > 1:
                    value = Masked(index_at_least(pos, begin), value, 0)
                result = value
                continue
            cond = index_less(pos, begin + n)
            if begin != 0:
                cond = Op("logical_and", [index_at_least(pos, begin), cond], torch.bool)
            result = Op("where", [cond, Masked(cond, value, 0), result], dtype)
        return result
    return LazyTensor(shape, dtype, ctx.device, loader=load)


@register_lowering(aten.constant_pad_nd)
def constant_pad_nd(ctx, x, pad, value=0):
    dtype = ctx.out_dtype()
    shape = ctx.sizes.shape(ctx.out_meta.shape)
    befores = {}
    for k in range(len(pad) // 2):
        befores[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])

    def load(idx):
        inner, conds = list(idx), []
        for d, (before, after) in befores.items():
            inner[d] = idx[d] - before
            if before > 0:
                conds.append(index_at_least(idx[d], before))
            if after > 0:
                conds.append(index_less(idx[d], before + x.shape[d]))
        v = cast(x.load(inner), dtype)
        if not conds:
            return v
        cond = conds[0]
        for c in conds[1:]:
            cond = Op("logical_and", [cond, c], torch.bool)
        return Masked(cond, v, value)
    return LazyTensor(shape, dtype, ctx.device, loader=load)


@register_lowering(aten.split_with_sizes, aten.split.Tensor)
def split(ctx, x, sizes, dim=0):
    dim = _norm_dim(dim, x.ndim)
    total = x.shape[dim]
    if isinstance(sizes, int):   # as many pieces as tracing made (the frontend guards that count)
        pieces = len(ctx.out_meta)
        sizes = [sizes] * (pieces - 1) + [sympy.expand(total - sizes * (pieces - 1))]
    outs, start = [], sympy.Integer(0)
    for n in sizes:
        outs.append(slice_(ctx, x, dim, start, start + n, 1))
        start += n
    return tuple(outs)


@register_lowering(aten.unbind)
def unbind(ctx, x, dim=0):
    return tuple(select(ctx, x, dim, k) for k in range(len(ctx.out_meta)))


