"""The aot layer's pipelines: the named steps run on each of its IR levels, in order.

- ``torch``: the frontend's torch-level graph, before tracing (so that the forward
  and the backward traced from it agree). It runs for every compiled graph, also one
  whose variants all come from the disk cache (the cache key is the graph it leaves).
  The graph belongs to the frontend: a step that rewrites it returns a copy.
- ``inference``: the ATen graph of a call without gradients.
- ``joint``: forward and backward in one graph, before the partition.
- ``forward`` / ``backward``: the two halves the partition cuts from the joint graph.
- ``aten``: ``trace_aten``'s graph (the ATen graph of a torch-level graph, for tools).

aot owns the ATen graphs (it has just traced or cut them): their steps edit them in
place, and import their passes when they first run (a process that loads every graph
from the disk cache imports none). ``run_pipeline`` (passes/pipeline.py) runs one and
dumps the graph after each step under ``SURGE_DEBUG_DIR``.
"""
from __future__ import annotations

from ..passes.cleanup import ATEN_CLEANUP
from ..passes.pipeline import PassStep, Pipeline
from .attention_masks import simplify_attention_masks

TORCH_GRAPH = Pipeline("torch", (
    # constant attention masks: the causal pattern becomes is_causal=True, one hiding nothing goes
    PassStep("attention_masks", lambda gm, ctx: simplify_attention_masks(gm)),
))
ATEN_INFERENCE = Pipeline("aten_inference", ATEN_CLEANUP)
ATEN_JOINT = Pipeline("aten_joint", ATEN_CLEANUP)
ATEN_FORWARD = Pipeline("aten_forward", ATEN_CLEANUP)
ATEN_BACKWARD = Pipeline("aten_backward", ATEN_CLEANUP)
ATEN_TRACED = Pipeline("aten", ATEN_CLEANUP)

ATEN_PIPELINES = {"inference": ATEN_INFERENCE, "joint": ATEN_JOINT, "forward": ATEN_FORWARD,
                  "backward": ATEN_BACKWARD}
