"""Lowerings of reductions and of the normalizations built on them.

Each reduction makes one buffer (``Lowering.reduction``); what follows it
(dividing by a count, subtracting a max, scaling by rstd) is lazy pointwise
work that the scheduler fuses with the reduction. So softmax is two
reductions and a pointwise epilogue, and becomes one kernel.
"""
from __future__ import annotations

import sympy
import torch

from .ops_pointwise import broadcast_loader
from .registry import NotLowered, register_lowering
from .sizes import product
from .tensor import LazyTensor
from .values import Constant, IndexValue, Op, cast

aten = torch.ops.aten


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulate low-precision floats in fp32, bools and small ints in int64."""
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if dtype == torch.bool or (not dtype.is_floating_point and not dtype.is_complex):
        return torch.int64
    return dtype


def _dims(x: LazyTensor, dim):
    if dim is None or dim == [] or dim == ():
        return list(range(x.ndim))
    if isinstance(dim, int):
        return [dim % max(x.ndim, 1)]
    return [d % max(x.ndim, 1) for d in dim]


def _count(x: LazyTensor, dims):
    return product(x.shape[d] for d in dims) if x.ndim else 1


def _count_value(x: LazyTensor, dims, dtype: torch.dtype):
    """The number of elements reduced, as a value of ``dtype``: a literal, or for a symbolic
    count the size expression converted (the kernel reads it from its size arguments)."""
    n = sympy.expand(_count(x, dims))
    if n.is_Integer:
        return Constant(float(n), dtype)
    return cast(IndexValue(n), dtype)


def _check(x):
    if not isinstance(x, LazyTensor) or x.dtype.is_complex:
        raise NotLowered("complex or non-tensor reduction input")
    if any(s == 0 for s in x.shape):
        raise NotLowered("reduction over an empty tensor")


def pointwise_of(ctx, shape, dtype, fn, *tensors):
    """A lazy ``fn(*values)`` over ``tensors`` broadcast to ``shape``."""
    loaders = [broadcast_loader(t, shape) for t in tensors]
    return LazyTensor(shape, dtype, ctx.device, loader=lambda idx: fn(*[ld(idx) for ld in loaders]))


@register_lowering(aten.sum.dim_IntList, aten.sum.default)
def sum_(ctx, x, dim=None, keepdim=False, *, dtype=None):
    _check(x)
    out = ctx.out_dtype()
    return ctx.reduction(x, _dims(x, dim), keepdim, "sum", out, accumulate_dtype(out))


@register_lowering(aten.prod.dim_int, aten.prod.default)
def prod(ctx, x, dim=None, keepdim=False, *, dtype=None):
    _check(x)
    out = ctx.out_dtype()
    return ctx.reduction(x, _dims(x, dim), keepdim, "prod", out, accumulate_dtype(out))


@register_lowering(aten.mean.dim, aten.mean.default)
def mean(ctx, x, dim=None, keepdim=False, *, dtype=None):
    _check(x)
    return _mean(ctx, x, dim, keepdim, ctx.out_dtype())


def _mean(ctx, x, dim, keepdim, out):
    dims = _dims(x, dim)
    acc = accumulate_dtype(out)
    total = ctx.reduction(x, dims, keepdim, "sum", acc, acc)
    n = _count_value(x, dims, acc)
    return pointwise_of(ctx, total.shape, out, lambda s: cast(Op("truediv", [s, n], acc), out), total)


@register_lowering(aten.amax, aten.amin, aten.max.default, aten.min.default)
def amax(ctx, x, dim=None, keepdim=False):
    _check(x)
    kind = "max" if ctx.node.target.overloadpacket in (aten.amax, aten.max) else "min"
    return ctx.reduction(x, _dims(x, dim), keepdim, kind, x.dtype)


@register_lowering(aten.argmax, aten.argmin)
def argmax(ctx, x, dim=None, keepdim=False):
    _check(x)
    kind = "argmax" if ctx.node.target.overloadpacket is aten.argmax else "argmin"
    # over all dims, the reduction's linear index is the flattened index argmax returns
    dims = list(range(x.ndim)) if dim is None else [dim]
    return ctx.reduction(x, dims, keepdim, kind, torch.int64, x.dtype)


@register_lowering(aten.max.dim, aten.min.dim)
def max_dim(ctx, x, dim, keepdim=False):
    _check(x)
    is_max = ctx.node.target.overloadpacket is aten.max
    values = ctx.reduction(x, [dim], keepdim, "max" if is_max else "min", x.dtype)
    indices = ctx.reduction(x, [dim], keepdim, "argmax" if is_max else "argmin", torch.int64, x.dtype)
    return values, indices


@register_lowering(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims,
                   aten.all.default)
def any_(ctx, x, dim=None, keepdim=False):
    _check(x)
    kind = "any" if ctx.node.target.overloadpacket is aten.any else "all"
    as_bool = pointwise_of(ctx, x.shape, torch.bool, lambda v: cast(v, torch.bool), x)
    return ctx.reduction(as_bool, _dims(x, dim), keepdim, kind, ctx.out_dtype(), torch.bool)


def _variance(ctx, x, dim, correction, keepdim, out_dtype):
    if correction is None:
        correction = 1
    acc = accumulate_dtype(out_dtype)
    return ctx.reduction(x, _dims(x, dim), keepdim, "var", out_dtype, acc, float(correction))


@register_lowering(aten.var.correction, aten.var.dim)
def var(ctx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    _check(x)
    if ctx.node.target is aten.var.dim:
        correction = 1 if unbiased in (None, True) else 0
    return _variance(ctx, x, dim, correction, keepdim, ctx.out_dtype())


@register_lowering(aten.std.correction, aten.std.dim)
def std(ctx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    _check(x)
    if ctx.node.target is aten.std.dim:
        correction = 1 if unbiased in (None, True) else 0
    out = ctx.out_dtype()
    acc = accumulate_dtype(out)
    v = _variance(ctx, x, dim, correction, keepdim, acc)
    return pointwise_of(ctx, v.shape, out, lambda s: cast(Op("sqrt", [s], acc), out), v)


@register_lowering(aten.var_mean.correction, aten.var_mean.dim)
def var_mean(ctx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    _check(x)
    if ctx.node.target is aten.var_mean.dim:
        correction = 1 if unbiased in (None, True) else 0
    out = ctx.out_dtype(0)
    variance = _variance(ctx, x, dim, correction, keepdim, out)
    return variance, _mean(ctx, x, dim, keepdim, ctx.out_dtype(1))


def _row_max(ctx, x, dim, acc):
    return ctx.reduction(pointwise_of(ctx, x.shape, acc, lambda v: cast(v, acc), x), [dim], True, "max", acc)


@register_lowering(aten._softmax, aten._log_softmax)
def softmax(ctx, x, dim, half_to_float=False):
    _check(x)
    out = ctx.out_dtype()
    acc = accumulate_dtype(out) if out.is_floating_point else out
    dim = dim % max(x.ndim, 1)
    row_max = _row_max(ctx, x, dim, acc)
    shifted = pointwise_of(ctx, x.shape, acc, lambda v, m: Op("sub", [cast(v, acc), m], acc), x, row_max)
    exps = pointwise_of(ctx, x.shape, acc, lambda v: Op("exp", [v], acc), shifted)
    total = ctx.reduction(exps, [dim], True, "sum", acc, acc)
    if ctx.node.target.overloadpacket is aten._log_softmax:
        return pointwise_of(ctx, x.shape, out,
                            lambda s, t: cast(Op("sub", [s, Op("log", [t], acc)], acc), out), shifted, total)
    return pointwise_of(ctx, x.shape, out, lambda e, t: cast(Op("truediv", [e, t], acc), out), exps, total)


@register_lowering(aten.logsumexp)
def logsumexp(ctx, x, dim, keepdim=False):
    _check(x)
    out = ctx.out_dtype()
    if not out.is_floating_point:
        raise NotLowered("integer logsumexp")
    acc = accumulate_dtype(out)
    dims = _dims(x, dim)
    row_max = ctx.reduction(pointwise_of(ctx, x.shape, acc, lambda v: cast(v, acc), x), dims, True, "max", acc)
    # an all -inf row keeps max = -inf; shift by 0 there so the result is -inf, not nan
    finite = pointwise_of(ctx, row_max.shape, acc, lambda m: Op(
        "where", [Op("isinf", [m], torch.bool), Constant(0.0, acc), m], acc), row_max)
    exps = pointwise_of(ctx, x.shape, acc, lambda v, m: Op("exp", [Op("sub", [cast(v, acc), m], acc)], acc),
                        x, finite)
    total = ctx.reduction(exps, dims, keepdim, "sum", acc, acc)
    shift = finite if keepdim else squeeze_dims(ctx, finite, dims)
    return pointwise_of(ctx, total.shape, out,
                        lambda t, m: cast(Op("add", [Op("log", [t], acc), m], acc), out), total, shift)


def squeeze_dims(ctx, t: LazyTensor, dims):
    keep = [d for d in range(t.ndim) if d not in dims]
    shape = tuple(t.shape[d] for d in keep)

    def load(idx):
        full = [0] * t.ndim
        for k, d in enumerate(keep):
            full[d] = idx[k]
        return t.load(full)
    return LazyTensor(shape, t.dtype, t.device, loader=load)


@register_lowering(aten.native_layer_norm)
def native_layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    _check(x)
    out = ctx.out_dtype(0)
    acc = accumulate_dtype(out)
    dims = list(range(x.ndim - len(normalized_shape), x.ndim))
    xf = pointwise_of(ctx, x.shape, acc, lambda v: cast(v, acc), x)
    mu = ctx.reduction(xf, dims, True, "sum", acc, acc)
    n = _count_value(x, dims, acc)
    mu = pointwise_of(ctx, mu.shape, acc, lambda s: Op("truediv", [s, n], acc), mu)
    variance = ctx.reduction(xf, dims, True, "var", acc, acc, 0.0)
    rstd = pointwise_of(ctx, variance.shape, acc,
                        lambda v: Op("rsqrt", [Op("add", [v, Constant(eps, acc)], acc)], acc), variance)
    normed = pointwise_of(ctx, x.shape, acc,
                          lambda v, m, r: Op("mul", [Op("sub", [v, m], acc), r], acc), xf, mu, rstd)
    extra = [t for t in (weight, bias) if t is not None]

    def affine(v, *wb):
        k = 0
        if weight is not None:
            v = Op("mul", [v, cast(wb[k], acc)], acc)
            k += 1
        if bias is not None:
            v = Op("add", [v, cast(wb[k], acc)], acc)
        return cast(v, out)
    y = pointwise_of(ctx, x.shape, out, affine, normed, *extra)
    stat_shape = ctx.sizes.shape(ctx.out_meta[1].shape)
    stat_dtype = ctx.out_dtype(1)
    mean_out = pointwise_of(ctx, stat_shape, stat_dtype, lambda m: cast(m, stat_dtype), mu)
    rstd_out = pointwise_of(ctx, stat_shape, stat_dtype, lambda r: cast(r, stat_dtype), rstd)
    return y, mean_out, rstd_out
