"""The pipelines of the ATen graphs aot traces, one per IR level.

- ``inference``: the ATen graph of a call without gradients.
- ``joint``: forward and backward in one graph, before the partition.
- ``forward`` / ``backward``: the two halves the partition cuts from the joint graph.
- ``aten``: ``trace_aten``'s graph (the ATen graph of a torch-level graph, for tools).

aot owns these graphs (it has just traced or cut them): the steps edit them in place.
The torch-level graph's pipeline is ``torch_pipeline.py``. ``run_pipeline``
(passes/pipeline.py) runs one and dumps the graph after each step under
``SURGE_DEBUG_DIR``.
"""
from __future__ import annotations

from ..passes.cleanup import ATEN_CLEANUP
from ..passes.pipeline import Pipeline

ATEN_INFERENCE = Pipeline("aten_inference", ATEN_CLEANUP)
ATEN_JOINT = Pipeline("aten_joint", ATEN_CLEANUP)
ATEN_FORWARD = Pipeline("aten_forward", ATEN_CLEANUP)
ATEN_BACKWARD = Pipeline("aten_backward", ATEN_CLEANUP)
ATEN_TRACED = Pipeline("aten", ATEN_CLEANUP)

ATEN_PIPELINES = {"inference": ATEN_INFERENCE, "joint": ATEN_JOINT, "forward": ATEN_FORWARD,
                  "backward": ATEN_BACKWARD}
