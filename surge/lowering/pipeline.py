"""The loop IR's pipeline: the named steps ``lower_graph`` runs on the graph it lowered.

Each step is ``LoopGraph -> LoopGraph`` and returns a new graph when it rewrites one
(buffers it changes are new objects). Under ``SURGE_DEBUG_DIR`` the graph after each
step is dumped as ``loop_ir.{k}_{step}.txt`` (passes/pipeline.py).
"""
from __future__ import annotations

from ..passes.pipeline import PassStep, Pipeline
from .fused_forms import fuse_forms

LOOP_IR = Pipeline("loop_ir", (
    # GELU's normal CDF and 1 + erf as one op each: every code generator renders them
    PassStep("fused_forms", fuse_forms),
), render=str, size=lambda graph: len(graph.buffers), suffix="txt", unit="buffers", channel="schedule")
