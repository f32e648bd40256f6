"""Loop-IR ops as Triton expressions: one rule per op name.

Rules take the argument expressions (strings) and the op's result dtype and
return an expression. fp16/bf16 values are computed in fp32, so float rules
see fp32 or fp64 operands. Functions Triton's core lacks come from libdevice
(``triton.language.extra.libdevice``); in the CPU interpreter, which lacks
libdevice, the generated module binds ``libdevice`` to surge's stand-ins
(``surge.runtime.interpreter_libdevice``), so the kernel source is the same.
Rules may call surge's own device functions (``functions.py``: erf, bf16 widening, and
the fused forms of ``lowering/fused_forms.py``, one function each).
"""
from __future__ import annotations

import torch

from ...lowering.op_groups import COSTLY_OPS as LOOP_IR_COSTLY_OPS
from ...registry import rule_registrar
from ..dtypes import compute_dtype

TRITON_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32",
    torch.int16: "tl.int16", torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
POINTER_TYPES = {
    torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float64: "*fp64",
    torch.int64: "*i64", torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8",
    torch.uint8: "*u8", torch.bool: "*i1",
}


def triton_dtype(dtype: torch.dtype) -> str:
    if dtype not in TRITON_DTYPES:
        raise NotImplementedError(f"dtype {dtype} has no Triton counterpart")
    return TRITON_DTYPES[dtype]


OP_RULES: dict = {}


rule = rule_registrar(OP_RULES)


def _infix(symbol):
    return lambda a, b, dtype: f"({a} {symbol} {b})"


@rule("add")
def _add(a, b, dtype):
    return f"({a} | {b})" if dtype == torch.bool else f"({a} + {b})"   # int1 + int1 would wrap


@rule("mul")
def _mul(a, b, dtype):
    return f"({a} & {b})" if dtype == torch.bool else f"({a} * {b})"


for _name, _sym in (("sub", "-"), ("eq", "=="), ("ne", "!="), ("lt", "<"),
                    ("le", "<="), ("gt", ">"), ("ge", ">="), ("bitwise_and", "&"), ("bitwise_or", "|"),
                    ("bitwise_xor", "^"), ("left_shift", "<<"), ("right_shift", ">>")):
    OP_RULES[_name] = _infix(_sym)

_CORE_UNARY = {"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt", "sin": "tl.sin", "cos": "tl.cos",
               "abs": "tl.abs", "floor": "tl.floor", "ceil": "tl.ceil",
               "exp2": "tl.exp2", "log2": "tl.log2", "rsqrt": "tl.rsqrt"}
for _name, _fn in _CORE_UNARY.items():
    OP_RULES[_name] = (lambda f: lambda a, dtype: f"{f}({a})")(_fn)

_LIBDEVICE_UNARY = "tan asin acos atan sinh cosh tanh asinh acosh atanh expm1 log1p log10 trunc".split()
for _name in _LIBDEVICE_UNARY:
    OP_RULES[_name] = (lambda f: lambda a, dtype: f"libdevice.{f}({a})")(_name)


@rule("erf")
def _erf(a, dtype):
    """fp32 (fp16/bf16 compute in it) through surge's branch-free erf (functions.py); fp64
    through libdevice's."""
    return f"_erf({a})" if compute_dtype(dtype) == torch.float32 else f"tl.erf({a})"


@rule("truediv")
def _truediv(a, b, dtype):
    return f"({a} / {b})"


@rule("neg")
def _neg(a, dtype):
    return f"(-{a})"


@rule("reciprocal")
def _reciprocal(a, dtype):
    return f"(1.0 / {a})"


@rule("sigmoid")
def _sigmoid(a, dtype):
    return f"tl.sigmoid({a})"


@rule("relu")
def _relu(a, dtype):
    if dtype.is_floating_point:   # relu(NaN) is NaN in eager; a GPU's max returns the other operand
        return f"tl.maximum({a}, 0.0, propagate_nan=tl.PropagateNan.ALL)"
    return f"tl.maximum({a}, 0)"


@rule("maximum")
def _maximum(a, b, dtype):
    if dtype.is_floating_point:
        return f"tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"
    return f"tl.maximum({a}, {b})"


@rule("minimum")
def _minimum(a, b, dtype):
    if dtype.is_floating_point:
        return f"tl.minimum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"
    return f"tl.minimum({a}, {b})"


@rule("round")
def _round(a, dtype):
    return f"libdevice.nearbyint({a})"


@rule("sign")
def _sign(a, dtype):
    t = triton_dtype(compute_dtype(dtype))
    return f"(({a} > 0).to({t}) - ({a} < 0).to({t}))"


@rule("pow")
def _pow(a, b, dtype):
    return f"libdevice.pow({a}, {b})"


@rule("atan2")
def _atan2(a, b, dtype):
    return f"libdevice.atan2({a}, {b})"


@rule("hypot")
def _hypot(a, b, dtype):
    return f"libdevice.hypot({a}, {b})"


@rule("copysign")
def _copysign(a, b, dtype):
    return f"libdevice.copysign({a}, {b})"


# Integer // and % round differently in compiled Triton (toward zero) and in the
# interpreter (toward -inf); these forms give the same result under both.
@rule("fmod")
def _fmod(a, b, dtype):
    if dtype.is_floating_point:
        return f"libdevice.fmod({a}, {b})"
    r = f"({a} - ({a} // {b}) * {b})"   # C's fmod: the sign of the dividend
    return f"tl.where(({r} != 0) & (({r} < 0) != ({a} < 0)), {r} - {b}, {r})"


@rule("remainder")
def _remainder(a, b, dtype):
    r = f"({a} - ({a} // {b}) * {b})"
    return f"tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {r} + {b}, {r})"


@rule("floordiv")
def _floordiv(a, b, dtype):
    q, r = f"({a} // {b})", f"({a} - ({a} // {b}) * {b})"
    return f"tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {q} - 1, {q})"


@rule("isnan")
def _isnan(a, dtype):
    return f"({a} != {a})"


@rule("isinf")
def _isinf(a, dtype):
    return f"(tl.abs({a}) == float('inf'))"


@rule("signbit")
def _signbit(a, dtype):
    """The sign bit read as a signed integer's: set for -0.0 and negative NaNs too (the
    interpreter has no libdevice.signbit, and ``x < 0`` misses both)."""
    if not dtype.is_floating_point:
        return f"({a} < 0)"   # never for bool and uint8, a block all the same
    bits = "tl.int64" if compute_dtype(dtype) == torch.float64 else "tl.int32"
    return f"({a}.to({bits}, bitcast=True) < 0)"


@rule("logical_not")
def _logical_not(a, dtype):
    return f"({a} == 0)"


@rule("bitwise_not")
def _bitwise_not(a, dtype):
    return f"(~{a})" if dtype != torch.bool else f"({a} == 0)"


@rule("logical_and")
def _logical_and(a, b, dtype):
    return f"(({a} != 0) & ({b} != 0))"


@rule("logical_or")
def _logical_or(a, b, dtype):
    return f"(({a} != 0) | ({b} != 0))"


@rule("logical_xor")
def _logical_xor(a, b, dtype):
    return f"(({a} != 0) ^ ({b} != 0))"


@rule("where")
def _where(c, a, b, dtype):
    return f"tl.where({c}, {a}, {b})"


@rule("normal_cdf")
def _normal_cdf(x, dtype):
    return f"_normal_cdf({x})"


@rule("one_plus_erf")
def _one_plus_erf(z, dtype):
    return f"_one_plus_erf({z})"


# Ops that run as many instructions (special-function units, libdevice series): a
# pointwise kernel with many of them is compute-bound, which its launch config weighs.
# Every libdevice call counts here (trunc too).
COSTLY_OPS = LOOP_IR_COSTLY_OPS | frozenset(_LIBDEVICE_UNARY)


def cast_expr(value: str, src: torch.dtype, dst: torch.dtype) -> str:
    """Convert between logical dtypes, rounding through fp16/bf16 as eager would."""
    if dst == torch.bool:
        return f"({value} != 0)"
    if dst == torch.bfloat16:
        return f"{value}.to(tl.bfloat16).to(tl.float32)"
    if dst == torch.float16:
        return f"{value}.to(tl.float16).to(tl.float32)"
    if compute_dtype(src) == compute_dtype(dst):
        return value
    return f"{value}.to({triton_dtype(dst)})"


def literal(value, dtype: torch.dtype) -> str:
    """``value`` as a Triton literal of ``dtype``'s kind: a float literal in float code, an
    integer one in integer code (a float there would turn an index into ``pointer + float``),
    0/1 for bools. Integer literals beyond int32 are int64 constexprs to Triton."""
    if dtype == torch.bool:
        return "1" if value else "0"
    if dtype.is_floating_point:
        value = float(value)
        if value != value:
            return 'float("nan")'
        if value in (float("inf"), float("-inf")):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    return str(int(value))
