"""Lowerings of elementwise ATen ops: math, comparisons, where, casts, clamp, activations.

Each op computes in one dtype and produces the node's dtype: arithmetic in the
output dtype (that is torch's type promotion, read off the node's metadata),
comparisons and predicates in the promoted dtype of their inputs. Inputs
broadcast right-aligned, as in torch.
"""
from __future__ import annotations

import math

import sympy
import torch

from .registry import NotLowered, register_lowering
from .tensor import LazyTensor
from .op_groups import ROUNDING_OPS
from .values import Constant, Op, Value, cast

aten = torch.ops.aten


def broadcast_loader(t: LazyTensor, out_shape):
    """Loader of ``t`` broadcast to ``out_shape`` (right-aligned)."""
    lead = len(out_shape) - t.ndim
    if tuple(t.shape) == tuple(out_shape[lead:]) and lead == 0:
        return t.load

    def load(idx):
        own = [sympy.Integer(0) if t.shape[k] == 1 else idx[lead + k] for k in range(t.ndim)]
        return t.load(own)
    return load


def promoted_dtype(*args) -> torch.dtype:
    """torch's result dtype of ``args`` (LazyTensors and Python scalars)."""
    probes = []
    for a in args:
        if isinstance(a, LazyTensor):
            probes.append(torch.empty((1,) * a.ndim, dtype=a.dtype, device="meta"))
        elif isinstance(a, (bool, int, float)):
            probes.append(a)
    result = probes[0]
    if len(probes) == 1:
        return result.dtype if isinstance(result, torch.Tensor) else torch.result_type(result, result)
    dtype = torch.result_type(probes[0], probes[1])
    for p in probes[2:]:
        dtype = torch.promote_types(dtype, torch.result_type(torch.empty((), dtype=dtype, device="meta"), p))
    return dtype


def make_pointwise(ctx, fn, args, compute_dtype: torch.dtype, out_dtype: torch.dtype | None = None):
    """A LazyTensor computing ``fn(*values)`` elementwise over broadcast ``args``."""
    out_dtype = out_dtype or ctx.out_dtype()
    shape = ctx.sizes.shape(ctx.out_meta.shape)
    loaders = []
    for a in args:
        if isinstance(a, LazyTensor):
            loaders.append(broadcast_loader(a, shape))
        elif isinstance(a, (bool, int, float)):
            const = Constant(a, compute_dtype)
            loaders.append(lambda idx, c=const: c)
        else:
            raise NotLowered(f"argument of type {type(a).__name__}")

    def load(idx):
        values = [cast(ld(idx), compute_dtype) for ld in loaders]
        return cast(fn(*values), out_dtype)
    return LazyTensor(shape, out_dtype, ctx.device, loader=load)


def _op(name):
    return lambda *vals: Op(name, vals, vals[0].dtype)


def _compare(name):
    return lambda *vals: Op(name, vals, torch.bool)


# aten op -> loop-IR op, computing in the output dtype
SAME_DTYPE_OPS = {
    aten.neg: "neg", aten.abs: "abs", aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1",
    aten.log: "log", aten.log2: "log2", aten.log10: "log10", aten.log1p: "log1p",
    aten.sqrt: "sqrt", aten.rsqrt: "rsqrt", aten.sin: "sin", aten.cos: "cos", aten.tan: "tan",
    aten.asin: "asin", aten.acos: "acos", aten.atan: "atan", aten.sinh: "sinh", aten.cosh: "cosh",
    aten.tanh: "tanh", aten.asinh: "asinh", aten.acosh: "acosh", aten.atanh: "atanh",
    aten.erf: "erf", aten.floor: "floor", aten.ceil: "ceil",
    aten.round: "round", aten.trunc: "trunc", aten.sign: "sign", aten.sigmoid: "sigmoid",
    aten.reciprocal: "reciprocal", aten.relu: "relu",
    aten.sub: "sub", aten.mul: "mul", aten.div: "truediv", aten.maximum: "maximum",
    aten.minimum: "minimum", aten.atan2: "atan2", aten.fmod: "fmod", aten.hypot: "hypot",
    aten.copysign: "copysign", aten.bitwise_and: "bitwise_and", aten.bitwise_or: "bitwise_or",
    aten.bitwise_xor: "bitwise_xor", aten.bitwise_not: "bitwise_not",
    aten.bitwise_left_shift: "left_shift", aten.bitwise_right_shift: "right_shift",
}
# predicates: compute in the promoted input dtype, produce bool
COMPARE_OPS = {
    aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
    aten.isnan: "isnan", aten.isinf: "isinf", aten.signbit: "signbit",
}
LOGICAL_OPS = {
    aten.logical_and: "logical_and", aten.logical_or: "logical_or",
    aten.logical_xor: "logical_xor", aten.logical_not: "logical_not",
}


def _same_dtype_rule(name):
    def lower(ctx, *args, **kwargs):
        if kwargs:   # round(x, decimals=) has its own rule; no other op of the table takes any
            raise NotLowered(f"{name} with {sorted(kwargs)}")
        dtype = ctx.out_dtype()
        if name in ROUNDING_OPS and not dtype.is_floating_point:
            return make_pointwise(ctx, lambda v: v, args, dtype)
        return make_pointwise(ctx, _op(name), args, dtype)
    return lower


def _register_table():
    for target, name in SAME_DTYPE_OPS.items():
        register_lowering(target)(_same_dtype_rule(name))
    for target, name in COMPARE_OPS.items():
        register_lowering(target)(
            lambda ctx, *args, _n=name: make_pointwise(ctx, _compare(_n), args, promoted_dtype(*args)))
    for target, name in LOGICAL_OPS.items():
        register_lowering(target)(
            lambda ctx, *args, _n=name: make_pointwise(ctx, _compare(_n), args, torch.bool))


_register_table()


@register_lowering(aten.round.decimals)
def round_decimals(ctx, x, *, decimals=0):
    """As eager: nearbyint(x * 10**d) / 10**d, or nearbyint(x / 10**-d) * 10**-d for d < 0."""
    dtype = ctx.out_dtype()
    if not dtype.is_floating_point or decimals == 0:
        return _same_dtype_rule("round")(ctx, x)
    scale = Constant(10.0 ** abs(decimals), dtype)
    into, back = ("mul", "truediv") if decimals > 0 else ("truediv", "mul")
    return make_pointwise(
        ctx, lambda v: Op(back, [Op("round", [Op(into, [v, scale], dtype)], dtype), scale], dtype), [x], dtype)


@register_lowering(aten.add)
def add(ctx, a, b, alpha=1):
    dtype = ctx.out_dtype()
    if alpha != 1:
        return make_pointwise(
            ctx, lambda x, y: Op("add", [x, Op("mul", [y, Constant(alpha, dtype)], dtype)], dtype),
            [a, b], dtype)
    return make_pointwise(ctx, _op("add"), [a, b], dtype)


@register_lowering(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, a, b, alpha=1):
    dtype = ctx.out_dtype()
    if alpha != 1:
        return make_pointwise(
            ctx, lambda x, y: Op("sub", [x, Op("mul", [y, Constant(alpha, dtype)], dtype)], dtype),
            [a, b], dtype)
    return make_pointwise(ctx, _op("sub"), [a, b], dtype)


@register_lowering(aten.rsub)
def rsub(ctx, a, b, alpha=1):
    return sub(ctx, b, a, alpha)


@register_lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(ctx, a, b, rounding_mode=None):
    dtype = ctx.out_dtype()
    if rounding_mode is None:
        return make_pointwise(ctx, _op("truediv"), [a, b], dtype)
    if not dtype.is_floating_point:
        if rounding_mode != "floor":
            raise NotLowered("integer division rounding toward zero")
        return make_pointwise(ctx, _op("floordiv"), [a, b], dtype)
    after = "trunc" if rounding_mode == "trunc" else "floor"
    return make_pointwise(ctx, lambda x, y: Op(after, [Op("truediv", [x, y], dtype)], dtype), [a, b], dtype)


@register_lowering(aten.remainder)
def remainder(ctx, a, b):
    dtype = ctx.out_dtype()
    if not dtype.is_floating_point:
        return make_pointwise(ctx, _op("remainder"), [a, b], dtype)

    def fn(x, y):  # x - y * floor(x / y), the sign of the divisor as in torch
        q = Op("floor", [Op("truediv", [x, y], dtype)], dtype)
        return Op("sub", [x, Op("mul", [y, q], dtype)], dtype)
    return make_pointwise(ctx, fn, [a, b], dtype)


@register_lowering(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def pow_(ctx, a, b):
    dtype = ctx.out_dtype()
    if not dtype.is_floating_point and not (isinstance(b, int) and b >= 0):
        raise NotLowered("integer power")
    if isinstance(b, (int, float)) and not isinstance(a, (int, float)):
        if b == 2:
            return make_pointwise(ctx, lambda x: Op("mul", [x, x], dtype), [a], dtype)
        if b == 1:
            return make_pointwise(ctx, lambda x: x, [a], dtype)
        if b == 0.5:
            return make_pointwise(ctx, _op("sqrt"), [a], dtype)
        if b == -1:
            return make_pointwise(ctx, _op("reciprocal"), [a], dtype)
        if isinstance(b, float) and b.is_integer():
            b = int(b)   # x ** 3.0 (tanh-GELU): multiplications as eager, not a libm pow per element
        if isinstance(b, int) and 0 <= b <= 4:
            def fn(x):
                out = x
                for _ in range(b - 1):
                    out = Op("mul", [out, x], dtype)
                return out if b else Constant(1, dtype)
            return make_pointwise(ctx, fn, [a], dtype)
    return make_pointwise(ctx, _op("pow"), [a, b], dtype)


@register_lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ctx, cond, a, b):
    dtype = ctx.out_dtype()
    shape = ctx.sizes.shape(ctx.out_meta.shape)
    cond_load = broadcast_loader(cond, shape)
    loaders = [broadcast_loader(x, shape) if isinstance(x, LazyTensor) else (lambda idx, c=Constant(x, dtype): c)
               for x in (a, b)]

    def load(idx):
        c = cast(cond_load(idx), torch.bool)
        return Op("where", [c, cast(loaders[0](idx), dtype), cast(loaders[1](idx), dtype)], dtype)
    return LazyTensor(shape, dtype, ctx.device, loader=load)


@register_lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx, x, mask, value):
    if isinstance(value, LazyTensor):
        if value.ndim != 0:
            raise NotLowered("masked_fill with a non-scalar tensor value")
    return where(ctx, mask, value, x)


@register_lowering(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min, aten.clamp_max)
def clamp(ctx, x, lo=None, hi=None):
    target = ctx.node.target
    if target.overloadpacket is aten.clamp_max:
        lo, hi = None, lo
    dtype = ctx.out_dtype()
    args = [x] + [v for v in (lo, hi) if v is not None]

    def fn(v, *bounds):
        k = 0
        if lo is not None:
            v = Op("maximum", [v, bounds[k]], dtype)
            k += 1
        if hi is not None:
            v = Op("minimum", [v, bounds[k]], dtype)
        return v
    return make_pointwise(ctx, fn, args, dtype)


@register_lowering(aten.hardtanh)
def hardtanh(ctx, x, lo=-1.0, hi=1.0):
    dtype = ctx.out_dtype()
    return make_pointwise(ctx, lambda v: Op("minimum", [Op("maximum", [v, Constant(lo, dtype)], dtype),
                                                        Constant(hi, dtype)], dtype), [x], dtype)


@register_lowering(aten._to_copy, aten.clone, aten.alias, aten.lift_fresh_copy)
def to_copy(ctx, x, *, dtype=None, device=None, layout=None, pin_memory=None, non_blocking=False,
            memory_format=None):
    if not isinstance(x, LazyTensor):
        raise NotLowered("non-tensor input")
    if device is not None and torch.device(device) != x.device:
        raise NotLowered("copy across devices")
    out = ctx.out_dtype()
    return make_pointwise(ctx, lambda v: v, [x], x.dtype, out)


@register_lowering(aten.copy)
def copy(ctx, dst, src, non_blocking=False):
    if not isinstance(src, LazyTensor) or src.device != ctx.device:
        raise NotLowered("copy from another device")
    return make_pointwise(ctx, lambda v: v, [src], src.dtype, ctx.out_dtype())


def _gelu_value(v: Value, approximate: str) -> Value:
    d = v.dtype
    c = lambda x: Constant(x, d)  # noqa: E731
    mul = lambda a, b: Op("mul", [a, b], d)  # noqa: E731
    if approximate == "tanh":
        cube = mul(mul(mul(c(0.044715), v), v), v)
        inner = mul(c(math.sqrt(2.0 / math.pi)), Op("add", [v, cube], d))
        return mul(mul(c(0.5), v), Op("add", [c(1.0), Op("tanh", [inner], d)], d))
    cdf = mul(c(0.5), Op("add", [c(1.0), Op("erf", [mul(v, c(1.0 / math.sqrt(2.0)))], d)], d))
    return mul(v, cdf)


@register_lowering(aten.gelu)
def gelu(ctx, x, approximate="none"):
    dtype = ctx.out_dtype()
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return make_pointwise(ctx, lambda v: _gelu_value(v, approximate), [x], compute, dtype)


@register_lowering(aten.silu)
def silu(ctx, x):
    dtype = ctx.out_dtype()
    return make_pointwise(ctx, lambda v: Op("mul", [v, Op("sigmoid", [v], v.dtype)], v.dtype), [x], dtype)


@register_lowering(aten.fill.Scalar)
def fill(ctx, x, value):
    dtype = ctx.out_dtype()
    return make_pointwise(ctx, lambda: Constant(value, dtype), [], dtype)


@register_lowering(aten.leaky_relu)
def leaky_relu(ctx, x, slope=0.01):
    dtype = ctx.out_dtype()
    zero = Constant(0, dtype)
    return make_pointwise(ctx, lambda v: Op("where", [Op("gt", [v, zero], torch.bool), v,
                                                      Op("mul", [v, Constant(slope, dtype)], dtype)], dtype),
                          [x], dtype)
