"""Bring ``prims`` ops back to ATen.

Some of torch's decompositions are written with torch's primitive ops
(``torch.ops.prims``). surge's graphs speak ATen only, so each prim that such a
decomposition uses is rewritten here as the equivalent ATen op(s). Elementwise
prims whose ATen namesake has the same meaning map by name; the rest have a rule.
"""
from __future__ import annotations

from typing import Callable

import torch

aten = torch.ops.aten

_RULES: dict[str, Callable] = {}

# Elementwise prims with an ATen op of the same name and meaning. (Their inputs
# arrive already broadcast and type-promoted, which the ATen op accepts as is.)
_SAME_NAME = frozenset({
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
    "bitwise_not", "bitwise_or", "bitwise_xor", "ceil", "cos", "cosh", "digamma", "eq", "erf",
    "erfc", "exp", "exp2", "expm1", "floor", "fmax", "fmin", "fmod", "ge", "gt", "hypot",
    "isfinite", "le", "lgamma", "log", "log10", "log1p", "log2", "lt", "maximum", "minimum",
    "mul", "ne", "neg", "nextafter", "pow", "reciprocal", "remainder", "round", "rsqrt",
    "sign", "signbit", "sin", "sinh", "sqrt", "sub", "add", "tan", "tanh", "trunc", "gcd",
})


def rule(*names: str):
    def wrap(fn):
        for name in names:
            _RULES[name] = fn
        return fn
    return wrap


def aten_body_for_prim(op) -> Callable | None:
    name = op._schema.name.split("::", 1)[1]
    if name in _RULES:
        return _RULES[name]
    if name in _SAME_NAME:
        packet = getattr(aten, name)
        for overload in ("Tensor", "default"):
            if overload in packet.overloads():
                return getattr(packet, overload)
    return None


@rule("div")
def _div(a, b):
    ints = all(not (x.dtype.is_floating_point or x.dtype.is_complex)
               for x in (a, b) if isinstance(x, torch.Tensor))
    return aten.div.Tensor_mode(a, b, rounding_mode="trunc") if ints else aten.div.Tensor(a, b)


@rule("convert_element_type")
def _convert(a, dtype):
    return aten._to_copy(a, dtype=dtype)


@rule("broadcast_in_dim")
def _broadcast_in_dim(a, shape, broadcast_dimensions):
    for d in range(len(shape)):
        if d not in broadcast_dimensions:
            a = aten.unsqueeze(a, d)
    return aten.expand(a, list(shape))


@rule("var")
def _var(a, dims, correction=1, *, output_dtype=None):
    return aten.var.correction(a, list(dims) if dims is not None else None, correction=correction)


@rule("sum")
def _sum(a, dims, *, output_dtype=None):
    return aten.sum.dim_IntList(a, list(dims), dtype=output_dtype)


@rule("amax")
def _amax(a, dims, *, output_dtype=None):
    return aten.amax(a, list(dims))


@rule("amin")
def _amin(a, dims, *, output_dtype=None):
    return aten.amin(a, list(dims))


@rule("prod")
def _prod(a, dims, *, output_dtype=None):
    for d in sorted(dims, reverse=True):
        a = aten.prod.dim_int(a, d)
    return a


@rule("squeeze")
def _squeeze(a, dimensions):
    return aten.squeeze.dims(a, list(dimensions))


@rule("transpose")
def _transpose(a, permutation):
    return aten.permute(a, list(permutation))


@rule("reshape", "collapse_view", "collapse", "split_dim")
def _reshape(a, *args):
    shape = _target_shape(a, *args)
    if not a.is_contiguous():
        a = aten.clone(a, memory_format=torch.contiguous_format)
    return aten.view(a, shape)


def _target_shape(a, *args):
    if len(args) == 1:                      # reshape(a, shape)
        return list(args[0])
    if len(args) == 2:                      # collapse(a, start, end)
        start, end = args
        shape = list(a.shape)
        width = 1
        for s in shape[start:end + 1]:
            width *= s
        return shape[:start] + [width] + shape[end + 1:]
    dim, outer = args[0], args[1]           # split_dim(a, dim, outer_length)
    shape = list(a.shape)
    return shape[:dim] + [outer, shape[dim] // outer] + shape[dim + 1:]


@rule("view_of", "view_of_dtype")
def _view_of(a, *args):
    return aten.alias(a) if not args else aten.view.dtype(a, args[0])


@rule("where")
def _where(pred, a, b):
    return aten.where.self(pred, a, b)


@rule("rev")
def _rev(a, dims):
    return aten.flip(a, list(dims))


@rule("clone")
def _clone(a, *, memory_format=torch.preserve_format):
    return aten.clone(a, memory_format=memory_format)


@rule("erf_inv")
def _erf_inv(a):
    return aten.erfinv(a)


@rule("iota")
def _iota(length, *, start, step, dtype, device, requires_grad):
    return aten.arange.start_step(start, start + length * step, step, dtype=dtype, device=device)


@rule("full")
def _full(shape, fill_value, *, dtype, device, requires_grad):
    return aten.full.default(list(shape), fill_value, dtype=dtype, device=device)


@rule("scalar_tensor")
def _scalar_tensor(s, *, dtype=None, device=None):
    return aten.scalar_tensor(s, dtype=dtype, device=device)


@rule("empty_strided")
def _empty_strided(shape, strides, *, dtype, device, requires_grad):
    return aten.empty_strided(list(shape), list(strides), dtype=dtype, device=device)
