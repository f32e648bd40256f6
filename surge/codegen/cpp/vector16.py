"""Explicit AVX-512 code for inner loops that load, store or round 16-bit floats.

GCC 12 auto-vectorizes the scalar bf16 helpers of the prelude, but it cannot use
``vcvtneps2bf16`` (no ``__bf16`` arithmetic before GCC 13), so every rounding to bf16
is integer code: a shift, an and, two adds, a NaN compare and blend, and a narrowing
permute per 16 floats. In an RMSNorm epilogue (two roundings per element) that is most
of the kernel. Here the innermost loop of such a kernel is also written with AVX-512
intrinsics, 16 floats per step, and the scalar loop stays as the tail and the fallback:

    int64_t r0_tail = 0;
    #ifdef SURGE_VEC16
    {
        __mmask16 special = 0;
        int64_t r0 = 0;
        for (; r0 + 16 <= 1024; r0 += 16) { ...vector code... }
        r0_tail = special ? 0 : r0;
    }
    #endif
    #pragma omp simd
    for (int64_t r0 = r0_tail; r0 < 1024; ++r0) { ...scalar code... }

Exactness: ``vcvtneps2bf16`` rounds to nearest even like eager, but it reads denormal
inputs as zero and keeps a NaN's sign and payload, where eager keeps denormals
(1e-39 -> 0x000b) and stores every NaN as 0x7fc0. Each value rounded to bf16 is
classified (``vfpclassps``: NaN or denormal) into the ``special`` mask; when a loop
met one, the scalar loop runs again over the whole range and overwrites what the
vector loop wrote. So the vector loop may only store (no reductions, no column sums,
no row-cache writes): it is run twice for such rows. Checked on all 2^32 floats: with
this fallback the vector rounding equals the scalar one. fp16 uses
``vcvtps2ph``/``vcvtph2ps``, the instructions the scalar ``_Float16`` casts compile to
(equal on all 2^32 floats, denormals and NaN included), so fp16 needs no check.

A loop is written this way when its whole body has a vector form (contiguous or
loop-invariant loads, float arithmetic, compares and selects, casts between float
types, GELU's normal CDF and ``1 + erf`` as the prelude's one-formula forms, the same
operations lane by lane) and it touches a 16-bit float; otherwise GCC's auto-vectorized scalar loop is
as good, and stays alone. ``SURGE_VEC16`` (``HELPERS``) needs AVX512F/BW/DQ and
AVX512-BF16; elsewhere the preprocessor drops the vector loop.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from ...lowering.sizes import index_symbol, linear_coefficient
from ...lowering.values import Constant, Load, Op
from ..gelu_fits import EXP2, NORMAL_CDF, NORMAL_CDF_CLAMP, ONE_PLUS_ERF, ONE_PLUS_ERF_CLAMP, horner
from .ops import load_expr, literal

if TYPE_CHECKING:
    from .kernel import CppKernelWriter
    from .scope import Scope

LANES = 16
MACRO = "SURGE_VEC16"
SIXTEEN_BIT = (torch.bfloat16, torch.float16)
FLOATS = (torch.float32,) + SIXTEEN_BIT
# A 1-D pointwise kernel runs its loop in blocks of this many elements: the unit that
# the scalar loop redoes after a NaN or denormal rounded to bf16.
BLOCK = 4096


def _lane_constant(c: float) -> str:
    return f"surge_v_c({c!r}f)"


def _lane_fma(a: str, b: str, c: str) -> str:
    return f"_mm512_fmadd_ps({a}, {b}, {c})"


# The prelude's surge_exp2f_nonpositive, surge_normal_cdf and surge_one_plus_erf in lanes:
# the same operations in the same order (fma for fma), so lanes equal the scalar results
# bit for bit (tests check it).
_GELU_LANES = f"""static inline __m512 surge_v_c(float c) {{ return _mm512_set1_ps(c); }}
static inline __m512 surge_v_exp2_nonpositive(__m512 y) {{
    const __m512 yc = _mm512_max_ps(y, surge_v_c(-127.0f));   // NaN lanes: the callers blend them back
    const __m512 shifted = _mm512_add_ps(yc, surge_v_c(12582912.0f));
    const __m512i n = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_set1_epi32(0x4B400000));
    const __m512 r = _mm512_sub_ps(yc, _mm512_sub_ps(shifted, surge_v_c(12582912.0f)));
{horner(EXP2, "r", _lane_fma, _lane_constant, declare="__m512 ")}
    const __m512i scale = _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(scale));
}}
static inline __m512 surge_v_normal_cdf(__m512 x) {{
    const __m512 a = _mm512_abs_ps(x);
    const __m512 t = _mm512_min_ps(a, {_lane_constant(NORMAL_CDF_CLAMP)});
{horner(NORMAL_CDF, "t", _lane_fma, _lane_constant, declare="__m512 ")}
    const __m512 half_erfc = surge_v_exp2_nonpositive(_mm512_fmadd_ps(p, a, surge_v_c(-1.0f)));
    const __mmask16 upper = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 out = _mm512_mask_blend_ps(upper, half_erfc, _mm512_sub_ps(surge_v_c(1.0f), half_erfc));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), out, x);
}}
static inline __m512 surge_v_one_plus_erf(__m512 z) {{
    const __m512 a = _mm512_abs_ps(z);
    const __m512 t = _mm512_min_ps(a, {_lane_constant(ONE_PLUS_ERF_CLAMP)});
{horner(ONE_PLUS_ERF, "t", _lane_fma, _lane_constant, declare="__m512 ")}
    const __m512 erfc = surge_v_exp2_nonpositive(_mm512_mul_ps(p, a));
    const __mmask16 upper = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 out = _mm512_mask_blend_ps(upper, erfc, _mm512_sub_ps(surge_v_c(2.0f), erfc));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q), out, z);
}}
"""


# The helpers of the vector loops, at the head of a module that has any (after the
# prelude). <immintrin.h> alone costs g++ ~0.3 s, so other modules go without it. The
# guard on SURGE_VEC16 keeps one copy when several modules share a library.
HELPERS = r'''
#if !defined(SURGE_VEC16) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512BF16__)
#define SURGE_VEC16 1
#include <immintrin.h>
static inline __m512 surge_v_load_bf16(const uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
static inline __m256i surge_v_to_bf16(__m512 v, __mmask16& special) {
    special |= _mm512_fpclass_ps_mask(v, 0x01 | 0x20 | 0x80);   // quiet NaN, denormal, signaling NaN
    return (__m256i)_mm512_cvtneps_pbh(v);
}
static inline void surge_v_store_bf16(uint16_t* p, __m512 v, __mmask16& special) {
    _mm256_storeu_si256((__m256i*)p, surge_v_to_bf16(v, special));
}
static inline __m512 surge_v_round_bf16(__m512 v, __mmask16& special) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(surge_v_to_bf16(v, special)), 16));
}
static inline __m512 surge_v_load_f16(const _Float16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
}
static inline void surge_v_store_f16(_Float16* p, __m512 v) {
    _mm256_storeu_si256((__m256i*)p, _mm512_cvtps_ph(v, _MM_FROUND_CUR_DIRECTION));
}
static inline __m512 surge_v_round_f16(__m512 v) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_CUR_DIRECTION));
}
// as the scalar rules: a NaN on either side wins; relu passes NaN
static inline __m512 surge_v_maximum(__m512 a, __m512 b) {
    const __mmask16 take_a = _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(take_a, b, a);
}
static inline __m512 surge_v_minimum(__m512 a, __m512 b) {
    const __mmask16 take_a = _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(take_a, b, a);
}
static inline __m512 surge_v_relu(__m512 a) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_LT_OQ), a, _mm512_setzero_ps());
}
''' + _GELU_LANES + r'''#endif
'''


class NoVectorForm(Exception):
    """The loop has a value that this module cannot write in vector form."""


@dataclasses.dataclass
class Lanes:
    name: str
    kind: str     # "f": 16 float lanes (__m512), "m": 16 bool lanes (__mmask16)


# -- vector forms of loop-IR ops: op -> (argument kinds, result kind, rule) ------------
VECTOR_RULES: dict = {}


def vector_rule(*ops, signature: str):
    """``signature`` is "<argument kinds>:<result kind>", e.g. "ff:m" for a compare."""
    args, result = signature.split(":")

    def add(rule):
        for op in ops:
            VECTOR_RULES[op] = (args, result, rule)
        return rule
    return add


def _infix(symbol):
    return lambda a, b: f"({a} {symbol} {b})"


for _op, _sym in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/")):
    vector_rule(_op, signature="ff:f")(_infix(_sym))
for _op, _predicate in (("eq", "_CMP_EQ_OQ"), ("ne", "_CMP_NEQ_UQ"), ("lt", "_CMP_LT_OQ"),
                        ("le", "_CMP_LE_OQ"), ("gt", "_CMP_GT_OQ"), ("ge", "_CMP_GE_OQ")):
    vector_rule(_op, signature="ff:m")((lambda p: lambda a, b: f"_mm512_cmp_ps_mask({a}, {b}, {p})")(_predicate))
for _op, _helper in (("maximum", "surge_v_maximum"), ("minimum", "surge_v_minimum")):
    vector_rule(_op, signature="ff:f")((lambda h: lambda a, b: f"{h}({a}, {b})")(_helper))
# on bools (the signature admits masks only): logical and bitwise ops are the same
for _op, _mask_op in (("logical_and", "&"), ("logical_or", "|"), ("logical_xor", "^"),
                      ("bitwise_and", "&"), ("bitwise_or", "|"), ("bitwise_xor", "^")):
    vector_rule(_op, signature="mm:m")((lambda s: lambda a, b: f"__mmask16({a} {s} {b})")(_mask_op))


# GELU's normal CDF and 1 + erf (lowering/fused_forms.py): the prelude's, in lanes
for _op in ("normal_cdf", "one_plus_erf"):
    vector_rule(_op, signature="f:f")((lambda f: lambda a: f"surge_v_{f}({a})")(_op))


@vector_rule("neg", signature="f:f")
def _neg(a):
    return f"(-{a})"   # a sign flip, as the scalar negation: -(+0) is -0


@vector_rule("abs", signature="f:f")
def _abs(a):
    return f"_mm512_abs_ps({a})"


@vector_rule("relu", signature="f:f")
def _relu(a):
    return f"surge_v_relu({a})"


@vector_rule("sqrt", signature="f:f")
def _sqrt(a):
    return f"_mm512_sqrt_ps({a})"


@vector_rule("rsqrt", signature="f:f")
def _rsqrt(a):
    return f"(_mm512_set1_ps(1.0f) / _mm512_sqrt_ps({a}))"   # as the scalar 1 / sqrt: both IEEE-exact


@vector_rule("reciprocal", signature="f:f")
def _reciprocal(a):
    return f"(_mm512_set1_ps(1.0f) / {a})"


@vector_rule("isnan", signature="f:m")
def _isnan(a):
    return f"_mm512_cmp_ps_mask({a}, {a}, _CMP_UNORD_Q)"


@vector_rule("logical_not", "bitwise_not", signature="m:m")
def _logical_not(a):
    return f"__mmask16(~{a})"


@vector_rule("where", signature="mff:f")
def _where(c, a, b):
    return f"_mm512_mask_blend_ps({c}, {b}, {a})"


def _kind(dtype: torch.dtype) -> str:
    if dtype in FLOATS:
        return "f"
    if dtype == torch.bool:
        return "m"
    raise NoVectorForm(f"{dtype} values")


class VectorLoop:
    """The vector form of one innermost loop; build with ``VectorLoop.build``."""

    def __init__(self, writer: CppKernelWriter, loop: Scope, var: str, cache_written: frozenset):
        self.writer = writer
        self.loop = loop               # the scalar loop's scope (hoisted values are in its parents)
        self.var = var
        self.symbol = index_symbol(var[0], int(var[1:]))
        self.cache_written = cache_written
        self.lines: list[str] = []
        self.memo: dict = {}
        self.counter = 0
        self.sixteen_bit = False       # touches a bf16/fp16 buffer or rounds to one
        self.checked = False           # rounds to bf16: the loop needs the special mask

    @classmethod
    def build(cls, writer: CppKernelWriter, loop: Scope, var: str, members: list,
              cache_written: frozenset) -> "VectorLoop | None":
        """The vector loop storing ``members`` (already emitted as scalar code in ``loop``), or None."""
        vector = cls(writer, loop, var, cache_written)
        try:
            for m in members:
                vector.store(m)
        except NoVectorForm:
            return None
        return vector if vector.sixteen_bit else None

    # -- values ------------------------------------------------------------------
    def tmp(self) -> str:
        self.counter += 1
        return f"v{self.counter - 1}"

    def assign(self, kind: str, expr: str) -> Lanes:
        name = self.tmp()
        self.lines.append(f"{'__m512' if kind == 'f' else '__mmask16'} {name} = {expr};")
        return Lanes(name, kind)

    def broadcast(self, scalar: str, dtype: torch.dtype) -> Lanes:
        kind = _kind(dtype)
        if kind == "f":
            return self.assign("f", f"_mm512_set1_ps({scalar})")
        return self.assign("m", f"__mmask16(({scalar}) ? 0xffff : 0)")

    def value(self, v) -> Lanes:
        if isinstance(v, Constant):
            return self.broadcast(literal(v.value, v.dtype), v.dtype)
        found = self.memo.get(id(v))
        if found is None:
            w = self.writer
            if w.target_scope(self.loop, v) is not self.loop:   # computed once per row, before the loop
                found = self.broadcast(w.emit(self.loop, v).name, v.dtype)
            else:
                found = self._value(v)
            self.memo[id(v)] = found
        return found

    def _value(self, v) -> Lanes:
        w = self.writer
        if id(v) in w.row_cache:
            if id(v) not in self.cache_written:
                raise NoVectorForm("the loop writes a row cache")
            if _kind(v.dtype) != "f":
                raise NoVectorForm("bool row cache")
            return self.assign("f", f"_mm512_loadu_ps(&{w.row_cache[id(v)]}[{w.r_linear()}])")
        if isinstance(v, Load):
            return self.load(v)
        if isinstance(v, Op):
            if v.op == "cast":
                return self.cast(v)
            if v.op not in VECTOR_RULES:
                raise NoVectorForm(f"op {v.op}")
            kinds, result, rule = VECTOR_RULES[v.op]
            args = [self.value(c) for c in v.children]
            if [a.kind for a in args] != list(kinds) or _kind(v.dtype) != result:
                raise NoVectorForm(f"op {v.op} on {[c.dtype for c in v.children]}")
            return self.assign(result, rule(*[a.name for a in args]))
        raise NoVectorForm(type(v).__name__)   # masked values, indices

    def cast(self, v: Op) -> Lanes:
        arg = self.value(v.children[0])
        src, dst = v.children[0].dtype, v.dtype
        if dst == torch.bool or _kind(dst) != "f":
            raise NoVectorForm(f"cast {src} -> {dst}")
        if arg.kind == "m":
            return self.assign("f", f"_mm512_maskz_mov_ps({arg.name}, _mm512_set1_ps(1.0f))")
        if dst == torch.bfloat16:
            self.sixteen_bit = self.checked = True
            return self.assign("f", f"surge_v_round_bf16({arg.name}, special)")
        if dst == torch.float16:
            self.sixteen_bit = True
            return self.assign("f", f"surge_v_round_f16({arg.name})")
        return arg

    def load(self, v: Load) -> Lanes:
        w = self.writer
        member = w.plan.member(v.buffer)
        if member is not None:
            if member.role == "reduction":
                reduced = w.reduced[v.buffer]
                return self.broadcast(reduced.name, reduced.dtype)
            return self.value(member.value)
        if v.indirect:
            raise NoVectorForm("gather")
        kind = _kind(v.dtype)
        pointer = w.pointer(v.buffer, out=False)
        index = w.index(v.index)
        step = linear_coefficient(w.affine(v.index), self.symbol)
        if step == 0:
            return self.broadcast(load_expr(f"{pointer}[{index}]", v.dtype), v.dtype)
        if kind != "f":
            raise NoVectorForm("bool load")   # bools are bytes: 64 to a vector, not 16
        if step != 1:
            raise NoVectorForm("strided load")
        if v.dtype in SIXTEEN_BIT:
            self.sixteen_bit = True
        helper = {torch.float32: "_mm512_loadu_ps", torch.bfloat16: "surge_v_load_bf16",
                  torch.float16: "surge_v_load_f16"}[v.dtype]
        return self.assign("f", f"{helper}(&{pointer}[{index}])")

    def store(self, member) -> None:
        w = self.writer
        dtype = w.buffers[member.buffer.name].dtype
        if dtype not in FLOATS:
            raise NoVectorForm(f"store of {dtype}")
        if member.indirect:
            raise NoVectorForm("scatter")
        if linear_coefficient(w.affine(member.store_index), self.symbol) != 1:
            raise NoVectorForm("strided store")
        value = member.value
        if isinstance(value, Op) and value.op == "cast" and value.dtype == dtype and value.children[0].dtype in FLOATS:
            value = value.children[0]   # rounding twice to the stored type gives what rounding once does
        lanes = self.value(value)
        if lanes.kind != "f":
            raise NoVectorForm("bool stored as float")
        address = f"&{w.pointer(member.buffer.name, out=True)}[{w.index(member.store_index)}]"
        if dtype == torch.bfloat16:
            self.sixteen_bit = self.checked = True
            self.lines.append(f"surge_v_store_bf16({address}, {lanes.name}, special);")
        elif dtype == torch.float16:
            self.sixteen_bit = True
            self.lines.append(f"surge_v_store_f16({address}, {lanes.name});")
        else:
            self.lines.append(f"_mm512_storeu_ps({address}, {lanes.name});")

    # -- the loop ------------------------------------------------------------------
    def loop_lines(self, begin: str, end: str, scalar_lines: list, scalar_pragma: str | None) -> list:
        """The vector loop over [begin, end), then the scalar loop over the tail (or all of it)."""
        v, tail = self.var, f"{self.var}_tail"
        out = [f"int64_t {tail} = {begin};", f"#ifdef {MACRO}", "{"]
        if self.checked:
            out.append("    __mmask16 special = 0;")
        out.append(f"    int64_t {v} = {begin};")
        out.append(f"    for (; {v} + {LANES} <= {end}; {v} += {LANES}) {{")
        out += ["        " + line for line in self.lines]
        out.append("    }")
        # a NaN or denormal rounded to bf16: the scalar loop redoes the range exactly
        out.append(f"    {tail} = special ? {begin} : {v};" if self.checked else f"    {tail} = {v};")
        out += ["}", "#endif"]
        if scalar_pragma:
            out.append(scalar_pragma)
        out.append(f"for (int64_t {v} = {tail}; {v} < {end}; ++{v}) {{")
        out += ["    " + line for line in scalar_lines]
        out.append("}")
        return out
