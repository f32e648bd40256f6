"""The clean-up steps every ATen level runs: dead code, common subexpressions, constants.

Each step imports its pass when it first runs: a process that loads every graph from the
disk cache imports the pipelines that name these steps, never the passes themselves.
"""
from __future__ import annotations

from .pipeline import PassStep


def _dead_code(gm, ctx):
    from .dce import eliminate_dead_code
    return eliminate_dead_code(gm, keep_random=ctx.keep_random)


def _common_subexpressions(gm, ctx):
    from .cse import eliminate_common_subexpressions
    return eliminate_common_subexpressions(gm)


def _constants(gm, ctx):
    from .constant_fold import fold_constants
    return fold_constants(gm)


ATEN_CLEANUP: tuple[PassStep, ...] = (
    PassStep("dce", _dead_code),
    PassStep("cse", _common_subexpressions),
    PassStep("constant_fold", _constants),
    PassStep("dce_after_fold", _dead_code),   # what folding left unused
)
