"""Polynomial fits behind exact GELU's one-formula forms, for every code generator.

``erfc(t) = 2^(t * P(t))`` with ``t = min(|z|, clamp)`` (weighted minimax fits on dense
grids; see ``triton/functions.py`` for their accuracy). ``NORMAL_CDF`` has GELU's
scale 1/sqrt(2) and half folded in (``half_erfc = 2^(|x| * P(t) - 1)``). ``EXP2`` fits
``2^r`` on [-0.5, 0.5] (1.2 ulp). Coefficients run from the highest degree down, for
Horner's rule with one fma per step. Imports nothing: the C++ prelude renders from it
when a cached graph loads.
"""
from __future__ import annotations

ONE_PLUS_ERF_CLAMP = 4.0
ONE_PLUS_ERF = (3.307784936623648e-06, -5.8511457609711215e-05, 0.0004088148125447333, -0.0012000560527667403,
                -0.0013965638354420662, 0.028872229158878326, -0.14877937734127045, -0.9183528423309326,
                -1.627913236618042)

NORMAL_CDF_CLAMP = 5.656854249492381
NORMAL_CDF = (1.46184817140238e-07, -3.656966100606951e-06, 3.613446460803971e-05, -0.00015000700659584254,
              -0.0002468799357302487, 0.007218057289719582, -0.05260145291686058, -0.4591764211654663,
              -1.1511085033416748)

EXP2 = (1.5394066576845944e-4, 1.3408148661255836e-3, 9.618324227631092e-3, 5.550302192568779e-2,
        2.4022647738456726e-1, 6.931472420692444e-1, 1.0)


def horner(coefficients, var: str, fma, const, indent: str = "    ", acc: str = "p",
           declare: str = "", end: str = ";") -> str:
    """Lines evaluating the polynomial into ``acc``: ``fma(a, b, c)`` and ``const(c)`` render
    one language's fused multiply-add and constant (``end``: its statement end)."""
    first, second, *rest = coefficients
    lines = [f"{indent}{declare}{acc} = {fma(var, const(first), const(second))}{end}"]
    lines += [f"{indent}{acc} = {fma(acc, var, const(c))}{end}" for c in rest]
    return "\n".join(lines)
