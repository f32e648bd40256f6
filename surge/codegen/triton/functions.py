"""Device functions generated kernels call: each a ``@triton.jit`` text, copied into every
kernel file that calls it (``module.kernel_file_text``), so a kernel file stays whole.

Why each exists:

- ``_bf16_to_f32``: a bf16 value widened by moving its bits up (exact, as every bf16 is
  an fp32 with a shorter mantissa). Triton's own ``.to(tl.float32)`` unpacks a register
  holding two bf16 with two instructions for the upper one; the shift and the mask it
  becomes here take one each. After ``.to(tl.bfloat16)`` it also keeps the rounding
  vectorized (one packed conversion per two values instead of one per value).
- ``_erf``: erf for fp32 without branches. libdevice's erff picks its polynomial
  coefficients per lane with predicated moves (about 30 instructions per element on
  sm_90); here both polynomials run with their coefficients as immediates and a select
  picks one (about 20). ``|x| < 1``: ``x + x * P(x*x)``; ``|x| >= 1``:
  ``1 - 2**Q(|x|)`` (``Q`` fits log2(erfc)), with ``|x|`` clamped to 4 where erf
  rounds to 1. Both are minimax fits of degree 5 (linear programming on dense grids);
  evaluated in fp32 with an exact exp2 they stay within 1.5 ulp of erf (libdevice
  erff: 2 ulp); the GPU's exp2 adds at most about half an ulp of the result.
- ``_one_plus_erf``: ``1 + erf(z)`` in one formula (GELU's ``0.5 * x * (1 + erf(x /
  sqrt 2))``): ``2 - erfc(|z|)`` for ``z >= 0``, ``erfc(|z|)`` below, with
  ``erfc(t) = 2**(t * P(t))`` for ``t = min(|z|, 4)`` (a weighted minimax fit of degree
  8). Within 2 ulp of the exact value for ``z >= 0``; for ``z < 0`` it keeps the
  relative accuracy that ``1 + erf(z)`` computed in fp32 loses to cancellation.
  About 14 instructions per element instead of erf's 20 and the add.
- ``_normal_cdf``: ``0.5 * (1 + erf(x / sqrt 2))``, the normal CDF of exact GELU
  (``x * cdf``), as ``_one_plus_erf`` with the scale and the half folded into its
  coefficients (``p_k / sqrt(2)**(k+1)``) and exponent: two multiplies fewer. Within
  1.8 ulp for ``x >= 0`` (eager's three roundings: 1.03), 1.1e-7 absolute everywhere.
- ``_to_bf16_rtne``: fp32 -> bf16 rounding to nearest even, as eager and GPUs round;
  Triton's CPU interpreter truncates instead (used only when interpreting).
- combine functions of ``tl.reduce`` for prod, argmax/argmin and Welford's var, and for
  float max/min: ``tl.max`` drops NaN, eager's max of a row holding one is NaN.
"""
from __future__ import annotations

import re

from ..gelu_fits import NORMAL_CDF, NORMAL_CDF_CLAMP, ONE_PLUS_ERF, ONE_PLUS_ERF_CLAMP, horner

def _fma(a: str, b: str, c: str) -> str:
    return f"tl.fma({a}, {b}, {c})"


FUNCTIONS = {
    "_bf16_to_f32": '''
@triton.jit
def _bf16_to_f32(v):
    return (v.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
''',
    "_erf": '''
@triton.jit
def _erf(x):
    s = x * x
    p = tl.fma(s, -0.0005651484825648367, 0.004923067521303892)
    p = tl.fma(p, s, -0.026716679334640503)
    p = tl.fma(p, s, 0.11280398815870285)
    p = tl.fma(p, s, -0.3761236071586609)
    p = tl.fma(p, s, 0.12837913632392883)
    near = tl.fma(x, p, x)
    t = tl.minimum(tl.abs(x), 4.0)
    q = tl.fma(t, -0.0018213547300547361, 0.022533705458045006)
    q = tl.fma(q, t, -0.1314506232738495)
    q = tl.fma(q, t, -0.9390461444854736)
    q = tl.fma(q, t, -1.6158065795898438)
    q = tl.fma(q, t, -0.0028256746008992195)
    far = 1.0 - tl.exp2(q)
    far = tl.where(x < 0, -far, far)
    # NaN fails the comparison and takes the near form, which keeps it NaN
    return tl.where(tl.abs(x) >= 1.0, far, near)
''',
    "_one_plus_erf": f'''
@triton.jit
def _one_plus_erf(z):
    t = tl.minimum(tl.abs(z), {ONE_PLUS_ERF_CLAMP!r}, propagate_nan=tl.PropagateNan.ALL)   # NaN stays NaN
{horner(ONE_PLUS_ERF, "t", _fma, repr, end="")}
    # times |z| itself: past the clamp erfc keeps falling, to 0 at infinity as eager's 1 + erf
    erfc = tl.exp2(p * tl.abs(z))
    return tl.where(z >= 0, 2.0 - erfc, erfc)
''',
    "_normal_cdf": f'''
@triton.jit
def _normal_cdf(x):
    t = tl.minimum(tl.abs(x), {NORMAL_CDF_CLAMP!r}, propagate_nan=tl.PropagateNan.ALL)
{horner(NORMAL_CDF, "t", _fma, repr, end="")}
    half_erfc = tl.exp2(tl.fma(p, tl.abs(x), -1.0))
    return tl.where(x >= 0, 1.0 - half_erfc, half_erfc)
''',
    "_to_bf16_rtne": '''
@triton.jit
def _to_bf16_rtne(x):
    bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    rounded = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return tl.where(x != x, x.to(tl.bfloat16), rounded)
''',
    "_prod_combine": '''
@triton.jit
def _prod_combine(a, b):
    return a * b
''',
    "_max_propagating_nan": '''
@triton.jit
def _max_propagating_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_min_propagating_nan": '''
@triton.jit
def _min_propagating_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_argmax_combine": '''
@triton.jit
def _argmax_combine(value1, index1, value2, index2):
    # a NaN wins (the first of several), as in eager
    nan1, nan2 = value1 != value1, value2 != value2
    take = (value2 > value1) | ((value2 == value1) & (index2 < index1)) | (nan2 & (~nan1 | (index2 < index1)))
    return tl.where(take, value2, value1), tl.where(take, index2, index1)
''',
    "_argmin_combine": '''
@triton.jit
def _argmin_combine(value1, index1, value2, index2):
    # a NaN wins (the first of several), as in eager
    nan1, nan2 = value1 != value1, value2 != value2
    take = (value2 < value1) | ((value2 == value1) & (index2 < index1)) | (nan2 & (~nan1 | (index2 < index1)))
    return tl.where(take, value2, value1), tl.where(take, index2, index1)
''',
    "_welford_combine": '''
@triton.jit
def _welford_combine(mean1, m2_1, weight1, mean2, m2_2, weight2):
    weight = weight1 + weight2
    frac = tl.where(weight == 0.0, 0.0, weight2 / weight)
    delta = mean2 - mean1
    return mean1 + delta * frac, m2_1 + m2_2 + delta * delta * weight1 * frac, weight
''',
}

_NAME = re.compile(r"\b_\w+")


def functions_called(source: str) -> list:
    """The device functions ``source`` calls or passes (``tl.reduce``), in ``FUNCTIONS`` order."""
    called = set(_NAME.findall(source))
    return [name for name in FUNCTIONS if name in called]
