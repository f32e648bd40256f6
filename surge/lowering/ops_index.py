"""Lowerings of gathers (embedding, index, gather, index_select) and of made-up
tensors (full, arange/iota, scalar_tensor).

A gather is a load whose index contains a symbol bound to another value (the
index tensor's element, wrapped for negative indices): ``Load(buf, ind0 * 64 + i1,
indirect=[(ind0, value)])``. The gathered-from tensor is realized (a buffer or a
strided view of one); the index values stay lazy and fuse.
"""
from __future__ import annotations

import itertools

import sympy
import torch

from .ops_pointwise import broadcast_loader
from .registry import NotLowered, register_lowering
from .size_vars import static_int
from .sizes import index_symbol
from .tensor import LazyTensor
from .values import Constant, IndexValue, Load, Op, cast

aten = torch.ops.aten
_indirect_ids = itertools.count()


def indirect_symbol() -> sympy.Symbol:
    """A fresh symbol for an index that a tensor's element gives (a gather's, a scatter's)."""
    return index_symbol("ind", next(_indirect_ids))


def wrapped_index(v, size):
    """``v`` or ``v + size`` for negative indices, as int64."""
    v = cast(v, torch.int64)
    size_c = Constant(static_int(size), torch.int64) if size.is_Integer else IndexValue(size)
    return Op("where", [Op("lt", [v, Constant(0, torch.int64)], torch.bool),
                        Op("add", [v, size_c], torch.int64), v], torch.int64)


def _broadcast_shape(shapes) -> tuple:
    """The right-aligned broadcast of ``shapes`` (size-1 dims stretch; sizes are expressions)."""
    out = []
    for k in range(1, max(len(s) for s in shapes) + 1):
        sizes = [s[-k] for s in shapes if len(s) >= k]
        out.append(next((n for n in sizes if n != 1), sympy.Integer(1)))
    return tuple(reversed(out))


def _affine_index(v) -> sympy.Expr | None:
    """The index expression ``v`` computes when it is integer arithmetic on loop indices
    (an ``arange`` used as an index: HF's positions and causal masks), else None."""
    if isinstance(v, IndexValue):
        return v.expr
    if isinstance(v, Constant) and not isinstance(v.value, (bool, float)):
        return sympy.Integer(int(v.value))
    if not isinstance(v, Op) or v.dtype not in (torch.int64, torch.int32):
        return None
    args = [_affine_index(c) for c in v.children]
    if any(a is None for a in args):
        return None
    if v.op == "cast" and v.children[0].dtype in (torch.int64, torch.int32):
        return args[0]
    if v.op == "add":
        return args[0] + args[1]
    if v.op == "mul" and any(a.is_Integer for a in args):
        return args[0] * args[1]
    return None


def _nonnegative(expr: sympy.Expr) -> bool:
    """Never negative for any loop index (loop index symbols are declared nonnegative)."""
    return bool(expr.is_nonnegative)


def gather_load(ctx, base: LazyTensor, per_dim) -> object:
    """Load ``base`` at ``per_dim``: each entry a sympy index or a Value (an indirect index).

    An index value that is integer arithmetic on loop indices, never negative, is put
    into the load's index as it is: an affine load the code generators vectorize,
    where a gather would compute the index per element in int64 and load it alone."""
    if base.view is None:
        base = ctx.realize(base)
    name, layout = base.view
    index, bindings = [], []
    for d, entry in enumerate(per_dim):
        if not isinstance(entry, sympy.Basic):
            affine = _affine_index(entry)
            if affine is not None and _nonnegative(affine):
                entry = affine
        if isinstance(entry, sympy.Basic):
            index.append(entry)
            continue
        symbol = indirect_symbol()
        bindings.append((symbol, wrapped_index(entry, base.shape[d])))
        index.append(symbol)
    return Load(name, layout.index(index), base.dtype, bindings)


def _index_tensor(t):
    if not isinstance(t, LazyTensor) or t.dtype not in (torch.int64, torch.int32):
        raise NotLowered("index tensors must be int64/int32 tensors (bool masks go to ATen)")
    return t


@register_lowering(aten.embedding)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    _index_tensor(indices)
    weight = ctx.realize(weight)
    shape = ctx.sizes.shape(ctx.out_meta.shape)

    def load(idx):
        return gather_load(ctx, weight, [indices.load(idx[:-1]), idx[-1]])
    return LazyTensor(shape, weight.dtype, ctx.device, loader=load)


def advanced_indexing(x: LazyTensor, indices) -> tuple:
    """(shape, per_dim) of ``x[indices]`` (index tensors, or None for a whole dim):
    ``per_dim(idx)`` gives, for an element ``idx`` of the result, its position in ``x``
    per dim (an index expression, or an index tensor's value). The broadcast index dims
    replace the indexed dims where those are adjacent, else they come first, as in torch."""
    indexed = [(d, _index_tensor(t)) for d, t in enumerate(indices) if t is not None]
    if not indexed:
        raise NotLowered("indexing with no index tensors")
    dims = [d for d, _ in indexed]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    bshape = _broadcast_shape([t.shape for _, t in indexed])
    nb = len(bshape)
    rest = [d for d in range(x.ndim) if d not in dims]
    first = dims[0] if adjacent else 0
    loaders = {d: broadcast_loader(t, bshape) for d, t in indexed}
    if adjacent:
        shape = tuple(x.shape[:first]) + bshape + tuple(x.shape[dims[-1] + 1:])
    else:
        shape = bshape + tuple(x.shape[d] for d in rest)

    def per_dim(idx):
        bidx = idx[first:first + nb]
        others = idx[:first] + idx[first + nb:]
        out = [None] * x.ndim
        for d in dims:
            out[d] = loaders[d](bidx)
        for d, i in zip(rest, others):
            out[d] = i
        return out
    return shape, per_dim


@register_lowering(aten.index.Tensor)
def index(ctx, x, indices):
    _, per_dim = advanced_indexing(x, indices)
    x = ctx.realize(x)
    shape = ctx.sizes.shape(ctx.out_meta.shape)
    return LazyTensor(shape, x.dtype, ctx.device, loader=lambda idx: gather_load(ctx, x, per_dim(list(idx))))


@register_lowering(aten.gather)
def gather(ctx, x, dim, index_t, sparse_grad=False):
    _index_tensor(index_t)
    if x.ndim == 0 or index_t.ndim != x.ndim:
        raise NotLowered("gather of a 0-dim tensor")
    dim = dim % max(x.ndim, 1)
    x = ctx.realize(x)

    def load(idx):
        per_dim = list(idx)
        per_dim[dim] = index_t.load(idx)
        return gather_load(ctx, x, per_dim)
    return LazyTensor(index_t.shape, x.dtype, ctx.device, loader=load)


@register_lowering(aten.index_select)
def index_select(ctx, x, dim, index_t):
    _index_tensor(index_t)
    if x.ndim == 0:
        raise NotLowered("index_select of a 0-dim tensor")
    dim = dim % max(x.ndim, 1)
    x = ctx.realize(x)
    shape = ctx.sizes.shape(ctx.out_meta.shape)

    def load(idx):
        per_dim = list(idx)
        per_dim[dim] = index_t.load([idx[dim]] if index_t.ndim else [])
        return gather_load(ctx, x, per_dim)
    return LazyTensor(shape, x.dtype, ctx.device, loader=load)


def _constant_tensor(ctx, value):
    dtype = ctx.out_dtype()
    shape = ctx.sizes.shape(ctx.out_meta.shape)
    if ctx.out_device() != ctx.device:
        raise NotLowered("constant on another device")
    const = Constant(value, dtype)
    return LazyTensor(shape, dtype, ctx.device, loader=lambda idx: const)


@register_lowering(aten.full.default, aten.full_like, aten.scalar_tensor, aten.zeros.default,
                   aten.ones.default, aten.zeros_like, aten.ones_like, aten.new_full, aten.new_zeros,
                   aten.new_ones)
def full(ctx, *args, **kwargs):
    packet = ctx.node.target.overloadpacket
    if packet in (aten.zeros, aten.zeros_like, aten.new_zeros):
        value = 0
    elif packet in (aten.ones, aten.ones_like, aten.new_ones):
        value = 1
    elif packet is aten.scalar_tensor:
        value = args[0]
    else:
        value = args[-1] if packet is not aten.new_full else args[2]
    if isinstance(value, LazyTensor):
        raise NotLowered("fill value is a tensor")
    return _constant_tensor(ctx, value)


@register_lowering(aten.arange.start_step, aten.arange.default, aten.arange.start)
def arange(ctx, *args, **kwargs):
    target = ctx.node.target
    if target is aten.arange.default:
        start, step = 0, 1
    elif target is aten.arange.start:
        start, step = args[0], 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else kwargs.get("step", 1)
    return _iota(ctx, start, step)


@register_lowering(torch.ops.prims.iota.default)
def iota(ctx, length, *, start, step, dtype, device, requires_grad=False):
    return _iota(ctx, start, step)


def _iota(ctx, start, step):
    dtype = ctx.out_dtype()
    shape = ctx.sizes.shape(ctx.out_meta.shape)
    if ctx.out_device() != ctx.device:
        raise NotLowered("arange on another device")

    def load(idx):
        if not dtype.is_floating_point:
            return cast(IndexValue(idx[0] * sympy.Integer(step) + sympy.Integer(start)), dtype)
        pos = cast(IndexValue(idx[0]), torch.float64 if dtype == torch.float64 else torch.float32)
        d = pos.dtype
        v = Op("add", [Op("mul", [pos, Constant(step, d)], d), Constant(start, d)], d)
        return cast(v, dtype)
    return LazyTensor(shape, dtype, ctx.device, loader=load)
