"""Forms of several loop-IR ops that one generated function computes in fewer
instructions, as accurately: GELU's normal CDF ``0.5 * (1 + erf(x / sqrt 2))`` and
``1 + erf(z)``. Both code generators consult them (Triton's device functions in
``triton/functions.py``, C++'s in ``cpp/prelude.py``); a backend without a function
for a form emits the ops one by one.
"""
from __future__ import annotations

import torch

from ..lowering.values import Constant, Op
from .dtypes import compute_dtype


# outer op name -> matchers of an ``Op`` node returning (form name, operand values) or None
FUSED_FORMS: dict = {}


def fused_form(v: Op):
    for match in FUSED_FORMS.get(v.op, ()):
        found = match(v)
        if found is not None:
            return found
    return None


def _fused(op: str):
    def register(match):
        FUSED_FORMS.setdefault(op, []).append(match)
        return match
    return register


def _is_constant(v, value: float) -> bool:
    return isinstance(v, Constant) and v.dtype.is_floating_point and abs(v.value - value) < 1e-12


def _operand_pairs(v: Op):
    """(a, b) and (b, a) of a commutative binary op."""
    return (v.children, v.children[::-1])


@_fused("mul")
def _normal_cdf(v: Op):
    """``0.5 * (1 + erf(x * sqrt(1/2)))`` in fp32 (exact GELU's ``cdf``): ``normal_cdf(x)``."""
    for half, one_plus in _operand_pairs(v):
        if not (_is_constant(half, 0.5) and isinstance(one_plus, Op) and one_plus.op == "add"):
            continue
        found = _one_plus_erf(one_plus)
        scaled = found[1][0] if found else None
        if isinstance(scaled, Op) and scaled.op == "mul" and compute_dtype(v.dtype) == torch.float32:
            for x, scale in _operand_pairs(scaled):
                if _is_constant(scale, 0.5 ** 0.5):
                    return "normal_cdf", [x]
    return None


@_fused("add")
def _one_plus_erf(v: Op):
    """``1 + erf(z)`` in fp32 (GELU's): ``one_plus_erf(z)``."""
    for one, erf in _operand_pairs(v):
        if (_is_constant(one, 1.0) and isinstance(erf, Op) and erf.op == "erf"
                and compute_dtype(v.dtype) == compute_dtype(erf.children[0].dtype) == torch.float32):
            return "one_plus_erf", [erf.children[0]]
    return None
