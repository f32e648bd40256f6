"""Loop-IR ops as C++ expressions: one rule per op name, plus types, casts and literals.

Rules take the argument expressions (strings) and the dtype they compute in
(the first operand's, as in the Triton rules) and return an expression.
fp16/bf16 are computed in float: loads convert up, stores and explicit casts
round through the narrow type. Float max/min/relu/clamp propagate NaN as eager
does; integer division by zero gives 0 instead of trapping the process.
"""
from __future__ import annotations

import math

import torch

from ...registry import rule_registrar
from ..dtypes import compute_dtype

# storage types of buffers; bools are stored as bytes: GCC does not vectorize loops that
# load C++ ``bool`` next to floats, and torch's bools are bytes holding 0 or 1
STORAGE_TYPES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "_Float16",
    torch.bfloat16: "uint16_t", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "uint8_t",
}


def storage_type(dtype: torch.dtype) -> str:
    if dtype not in STORAGE_TYPES:
        raise NotImplementedError(f"dtype {dtype} has no C++ counterpart in surge's cpp backend")
    return STORAGE_TYPES[dtype]


def ctype(dtype: torch.dtype) -> str:
    """The C++ type a value of ``dtype`` is computed in."""
    if dtype == torch.bool:
        return "bool"
    return storage_type(compute_dtype(dtype))


def load_expr(pointer_element: str, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return f"({pointer_element} != 0)"
    if dtype == torch.float16:
        return f"static_cast<float>({pointer_element})"
    if dtype == torch.bfloat16:
        return f"surge_bf16_to_float({pointer_element})"
    return pointer_element


def store_expr(value: str, value_dtype: torch.dtype, dtype: torch.dtype) -> str:
    """``value`` (computed as ``value_dtype``) converted for a buffer of ``dtype``."""
    if dtype == torch.bfloat16:
        return f"surge_float_to_bf16({value})"
    if dtype == torch.bool and value_dtype != torch.bool:
        return f"({value} != 0)"
    if ctype(value_dtype) == storage_type(dtype):
        return value
    return f"static_cast<{storage_type(dtype)}>({value})"


def cast_expr(value: str, src: torch.dtype, dst: torch.dtype) -> str:
    """Convert between logical dtypes, rounding through fp16/bf16 as eager would."""
    if dst == torch.bool:
        return f"({value} != 0)"
    if dst == torch.float16:
        return f"static_cast<float>(static_cast<_Float16>({value}))"
    if dst == torch.bfloat16:
        return f"surge_bf16_to_float(surge_float_to_bf16({value}))"
    if ctype(src) == ctype(dst):
        return value
    return f"static_cast<{ctype(dst)}>({value})"


def literal(value, dtype: torch.dtype) -> str:
    t = ctype(dtype)
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        value = float(value)
        if math.isnan(value):
            return f"std::numeric_limits<{t}>::quiet_NaN()"
        if math.isinf(value):
            return ("" if value > 0 else "-") + f"std::numeric_limits<{t}>::infinity()"
        return f"{t}({value!r})"
    value = int(value)
    if value == -2**63:
        return "std::numeric_limits<int64_t>::min()"
    return f"{t}({value}LL)" if t == "int64_t" else f"{t}({value})"


OP_RULES: dict = {}


rule = rule_registrar(OP_RULES)


def _infix(symbol):
    return lambda a, b, dtype: f"({a} {symbol} {b})"


for _name, _sym in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"), ("eq", "=="),
                    ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="),
                    ("bitwise_and", "&"), ("bitwise_or", "|"), ("bitwise_xor", "^"),
                    ("left_shift", "<<"), ("right_shift", ">>")):
    OP_RULES[_name] = _infix(_sym)

# std:: functions, overloaded for float and double; glibc's libmvec vectorizes
# the common ones (declared SIMD in the prelude).
_STD_UNARY = ("exp2 expm1 log log2 log10 log1p sqrt sin cos tan asin acos atan sinh cosh tanh "
              "asinh acosh atanh erf floor ceil trunc").split()
for _name in _STD_UNARY:
    OP_RULES[_name] = (lambda f: lambda a, dtype: (f"std::{f}({a})" if dtype.is_floating_point
                                                   else _integer_unary(f, a, dtype)))(_name)
for _name in ("pow", "atan2", "hypot", "copysign"):
    OP_RULES[_name] = (lambda f: lambda a, b, dtype: f"std::{f}({a}, {b})")(_name)


# the prelude's one-formula forms of lowering/fused_forms.py (fp32)
for _name in ("normal_cdf", "one_plus_erf"):
    OP_RULES[_name] = (lambda f: lambda a, dtype: f"surge_{f}({a})")(_name)


@rule("exp")
def _exp(a, dtype):
    if dtype == torch.float32:
        return f"surge_expf({a})"   # the prelude's: vectorizes whatever the inputs (see prelude.py)
    return f"std::exp({a})" if dtype.is_floating_point else _integer_unary("exp", a, dtype)


def _integer_unary(f: str, a: str, dtype) -> str:
    if f in ("floor", "ceil", "trunc"):
        return a
    raise NotImplementedError(f"{f} of an integer tensor in C++")


@rule("neg")
def _neg(a, dtype):
    return f"(-{a})"


@rule("abs")
def _abs(a, dtype):
    if dtype.is_floating_point:
        return f"std::fabs({a})"
    return f"({a} < 0 ? -{a} : {a})"


@rule("rsqrt")
def _rsqrt(a, dtype):
    return f"({ctype(dtype)}(1) / std::sqrt({a}))"


@rule("reciprocal")
def _reciprocal(a, dtype):
    return f"({ctype(dtype)}(1) / {a})"


@rule("sigmoid")
def _sigmoid(a, dtype):
    t = ctype(dtype)
    return f"({t}(1) / ({t}(1) + {_exp(f'-{a}', dtype)}))"


@rule("relu")
def _relu(a, dtype):
    return f"({a} < 0 ? {ctype(dtype)}(0) : {a})"   # NaN < 0 is false: NaN passes through


@rule("maximum")
def _maximum(a, b, dtype):
    if dtype.is_floating_point:
        return f"(({a} > {b} || {a} != {a}) ? {a} : {b})"   # NaN from either side wins
    return f"({a} > {b} ? {a} : {b})"


@rule("minimum")
def _minimum(a, b, dtype):
    if dtype.is_floating_point:
        return f"(({a} < {b} || {a} != {a}) ? {a} : {b})"
    return f"({a} < {b} ? {a} : {b})"


@rule("round")
def _round(a, dtype):
    return f"std::nearbyint({a})" if dtype.is_floating_point else a   # half to even


@rule("sign")
def _sign(a, dtype):
    t = ctype(dtype)
    if dtype == torch.bool:
        return a
    return f"{t}(({a} > 0) - ({a} < 0))"   # sign(NaN) is 0, as in eager


@rule("fmod")
def _fmod(a, b, dtype):
    if dtype.is_floating_point:
        return f"std::fmod({a}, {b})"
    return f"({b} == 0 ? {ctype(dtype)}(0) : {ctype(dtype)}({a} % {b}))"


@rule("remainder")
def _remainder(a, b, dtype):
    t = ctype(dtype)
    r = f"{t}({a} % ({b} == 0 ? {t}(1) : {b}))"
    return f"({b} == 0 ? {t}(0) : (({r} != 0 && (({r} < 0) != ({b} < 0))) ? {t}({r} + {b}) : {r}))"


@rule("floordiv")
def _floordiv(a, b, dtype):
    t = ctype(dtype)
    safe_b = f"({b} == 0 ? {t}(1) : {b})"
    q, r = f"{t}({a} / {safe_b})", f"{t}({a} % {safe_b})"
    return f"({b} == 0 ? {t}(0) : (({r} != 0 && (({r} < 0) != ({b} < 0))) ? {t}({q} - 1) : {q}))"


@rule("isnan")
def _isnan(a, dtype):
    return f"({a} != {a})" if dtype.is_floating_point else "false"


@rule("isinf")
def _isinf(a, dtype):
    if not dtype.is_floating_point:
        return "false"
    return f"(std::fabs({a}) == std::numeric_limits<{ctype(dtype)}>::infinity())"


@rule("signbit")
def _signbit(a, dtype):
    if compute_dtype(dtype) == torch.float32:
        # the sign bit read as a signed integer's (the prelude's memcpy): GCC 12 vectorizing
        # std::signbit of a float widened from bf16 with 512-bit vectors fails with an
        # internal compiler error
        return f"(surge_float_to_bits({a}) < 0)"
    if dtype.is_floating_point:
        return f"std::signbit({a})"
    return "false" if dtype in (torch.bool, torch.uint8) else f"({a} < 0)"


@rule("logical_not")
def _logical_not(a, dtype):
    return f"({a} == 0)"


@rule("bitwise_not")
def _bitwise_not(a, dtype):
    return f"(!{a})" if dtype == torch.bool else f"{ctype(dtype)}(~{a})"


@rule("logical_and")
def _logical_and(a, b, dtype):
    return f"(({a} != 0) & ({b} != 0))"


@rule("logical_or")
def _logical_or(a, b, dtype):
    return f"(({a} != 0) | ({b} != 0))"


@rule("logical_xor")
def _logical_xor(a, b, dtype):
    return f"(({a} != 0) != ({b} != 0))"


@rule("where")
def _where(c, a, b, dtype):
    return f"({c} ? {a} : {b})"
