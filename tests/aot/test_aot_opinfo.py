"""The OpInfo sweep through "aot_eager" (see opinfo_sweep.py).

CI runs a stable half of the ops (chosen by a hash of the op's name, so the
same ops every run); ``SURGE_FULL_SWEEP=1`` runs all of them. An op may fall
back to eager only if it is listed in opinfo_known.py (and in docs/aot.md) with
its reason; a wrong value or gradient, or a crash, always fails.
"""
import os

import pytest

from . import opinfo_sweep
from .opinfo_known import KNOWN_FALLBACKS

FULL = os.environ.get("SURGE_FULL_SWEEP", "") not in ("", "0")
OPS = [op for op in opinfo_sweep.all_ops() if FULL or opinfo_sweep.stable_fraction(opinfo_sweep.op_id(op), 0.5)]


@pytest.mark.parametrize("op", OPS, ids=opinfo_sweep.op_id)
def test_op_through_aot_eager(op):
    outcome = opinfo_sweep.run_op(op)
    for kind, result in (("forward", outcome.forward), ("gradient", outcome.grad)):
        assert result not in ("mismatch", "error"), f"{kind}: {result}: {outcome.reason}"
        if result == "fallback":
            assert outcome.name in KNOWN_FALLBACKS, (
                f"{kind} fell back to eager and is not a known fallback: {outcome.reason}")
