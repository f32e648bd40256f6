"""Lowerings of gathers (embedding, index, gather, index_select) and of made-up
tensors (full, arange/iota, scalar_tensor).

A gather is a load whose index contains a symbol bound to another value (the
index tensor's element, wrapped for negative indices where the op counts them from the
end, and checked against the dim's size): ``Load(buf, ind0 * 64 + i1, indirect=[(ind0,
value)])``. The gathered-from tensor is realized (a buffer or a strided view of one);
the index values stay lazy and fuse.

Each index value a gather or scatter reads is an ``IndexCheck``: an index out of range
makes the kernel report it and the host code raise what eager raises for that op
(``IndexRule``), naming the user's line.
"""
from __future__ import annotations

import dataclasses
import itertools

import sympy
import torch

from .ops_pointwise import broadcast_loader
from .registry import NotLowered, register_lowering
from .size_vars import static_int
from .sizes import index_symbol
from .tensor import LazyTensor
from .values import Constant, IndexCheck, IndexValue, Load, Op, cast

aten = torch.ops.aten
_indirect_ids = itertools.count()


def indirect_symbol() -> sympy.Symbol:
    """A fresh symbol for an index that a tensor's element gives (a gather's, a scatter's)."""
    return index_symbol("ind", next(_indirect_ids))


@dataclasses.dataclass(frozen=True)
class IndexRule:
    """How an op takes the index values it reads, as eager does: whether a negative index
    counts from the end (advanced indexing) or is out of range (embedding, gather, ...),
    and the exception type eager raises for one out of range."""
    negative_from_end: bool
    error: str   # "IndexError" or "RuntimeError"


ADVANCED_INDEXING = IndexRule(True, "IndexError")         # x[idx], x[idx] = v (index, index_put)
COUNTED_FROM_ZERO = IndexRule(False, "IndexError")        # embedding, index_select
COUNTED_FROM_ZERO_RUNTIME = IndexRule(False, "RuntimeError")   # gather, scatter


def size_value(size):
    """A dim's size as an int64 value."""
    return Constant(static_int(size), torch.int64) if size.is_Integer else IndexValue(size)


def wrapped_index(v, size):
    """``v`` or ``v + size`` for negative indices, as int64."""
    v = cast(v, torch.int64)
    return Op("where", [Op("lt", [v, Constant(0, torch.int64)], torch.bool),
                        Op("add", [v, size_value(size)], torch.int64), v], torch.int64)


def index_checker(ctx, rule: IndexRule):
    """``check(v, size, dim)``: the index value ``v`` into dim ``dim`` of ``size``, taken as
    ``rule`` says and checked, its error naming the op being lowered now and its line
    (made here: loaders run later, while lowering the ops that read them)."""
    op = (ctx.origin() or ("indexing",))[0]
    where = ctx.location()

    def check(v, size, dim: int) -> IndexCheck:
        v = wrapped_index(v, size) if rule.negative_from_end else cast(v, torch.int64)
        message = f"{op}: index out of bounds for dimension {dim} with size {size}"
        return IndexCheck(v, size_value(size), (rule.error, f"{where}: {message}" if where else message))
    return check


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


def gather_load(ctx, base: LazyTensor, per_dim, check) -> object:
    """Load ``base`` at ``per_dim``: each entry a sympy index or a Value (an indirect index,
    taken and checked by ``check`` (``index_checker``); None: surge made it, in range by
    construction).

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
        if check is None:
            bindings.append((symbol, cast(entry, torch.int64)))
        else:
            bindings.append((symbol, check(entry, base.shape[d], d)))
        index.append(symbol)
    return Load(name, layout.index(index), base.dtype, bindings)


def index_tensor(t):
    if not isinstance(t, LazyTensor) or t.dtype not in (torch.int64, torch.int32):
        raise NotLowered("index tensors must be int64/int32 tensors (bool masks go to ATen)")
    return t


@register_lowering(aten.embedding)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    index_tensor(indices)
    weight = ctx.realize(weight)
    shape = ctx.sizes.shape(ctx.out_meta.shape)
    check = index_checker(ctx, COUNTED_FROM_ZERO)

    def load(idx):
        return gather_load(ctx, weight, [indices.load(idx[:-1]), idx[-1]], check)
    return LazyTensor(shape, weight.dtype, ctx.device, loader=load)


def advanced_indexing(x: LazyTensor, indices) -> tuple:
    """(shape, per_dim) of ``x[indices]`` (index tensors, or None for a whole dim):
    ``per_dim(idx)`` gives, for an element ``idx`` of the result, its position in ``x``
    per dim (an index expression, or an index tensor's value). The broadcast index dims
    replace the indexed dims where those are adjacent, else they come first, as in torch."""
    indexed = [(d, index_tensor(t)) for d, t in enumerate(indices) if t is not None]
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
    check = index_checker(ctx, ADVANCED_INDEXING)
    return LazyTensor(shape, x.dtype, ctx.device, loader=lambda idx: gather_load(ctx, x, per_dim(list(idx)), check))


@register_lowering(aten.gather)
def gather(ctx, x, dim, index_t, sparse_grad=False):
    index_tensor(index_t)
    if x.ndim == 0 or index_t.ndim != x.ndim:
        raise NotLowered("gather of a 0-dim tensor")
    dim = dim % max(x.ndim, 1)
    x = ctx.realize(x)
    check = index_checker(ctx, COUNTED_FROM_ZERO_RUNTIME)

    def load(idx):
        per_dim = list(idx)
        per_dim[dim] = index_t.load(idx)
        return gather_load(ctx, x, per_dim, check)
    return LazyTensor(index_t.shape, x.dtype, ctx.device, loader=load)


@register_lowering(aten.index_select)
def index_select(ctx, x, dim, index_t):
    index_tensor(index_t)
    if x.ndim == 0:
        raise NotLowered("index_select of a 0-dim tensor")
    dim = dim % max(x.ndim, 1)
    x = ctx.realize(x)
    shape = ctx.sizes.shape(ctx.out_meta.shape)
    check = index_checker(ctx, COUNTED_FROM_ZERO)

    def load(idx):
        per_dim = list(idx)
        per_dim[dim] = index_t.load([idx[dim]] if index_t.ndim else [])
        return gather_load(ctx, x, per_dim, check)
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
