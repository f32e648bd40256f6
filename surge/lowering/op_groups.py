"""The loop IR's op vocabulary and the property groups every stage reads, in one place.

``Op`` nodes (values.py) take their names from ``OPS``; a code generator has one render
rule per name. The groups below say what an op is like (costly, rounding, a fused
form), so that the scheduler's and the generators' heuristics agree on one list.
"""
from __future__ import annotations

UNARY_OPS = frozenset("""
    neg abs exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan
    sinh cosh tanh asinh acosh atanh erf floor ceil round trunc sign sigmoid
    reciprocal logical_not bitwise_not isnan isinf relu signbit
""".split())
BINARY_OPS = frozenset("""
    add sub mul truediv maximum minimum pow atan2 fmod hypot copysign floordiv remainder
    eq ne lt le gt ge logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor
    left_shift right_shift
""".split())
TERNARY_OPS = frozenset({"where"})

# Several ops that one function computes in fewer instructions, as accurately; the
# loop-IR step ``fused_forms`` puts them in (fused_forms.py). The value: how many ops
# of the plain form each stands for (heuristics that count ops count those).
FUSED_FORM_OPS = {
    "normal_cdf": 4,     # 0.5 * (1 + erf(x * sqrt(1/2)))   (exact GELU's cdf)
    "one_plus_erf": 2,   # 1 + erf(z)
}

OPS = UNARY_OPS | BINARY_OPS | TERNARY_OPS | frozenset(FUSED_FORM_OPS) | {"cast"}

# Ops whose evaluation costs far more than a load from L1 (transcendental calls, series):
# a kernel with many of them is compute-bound (Triton's launch configs weigh them), and a
# value containing one is worth keeping in a row cache (C++ reduction kernels).
COSTLY_OPS = frozenset("""
    exp exp2 expm1 log log2 log10 log1p sin cos tan asin acos atan sinh cosh tanh
    asinh acosh atanh erf sigmoid pow atan2 hypot fmod
""".split()) | frozenset(FUSED_FORM_OPS)

# Rounding an integer (or bool) gives it back: no op, and none for a code generator's
# float-only rounding functions to reject.
ROUNDING_OPS = frozenset({"floor", "ceil", "round", "trunc"})
