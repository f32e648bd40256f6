"""Ahead-of-time backward: trace autograd's backward into the same graph.

After the forward ran on tracer tensors that require grad, eager autograd has
built its usual graph of backward nodes over them. Asking it for the gradients
with tracer *tangents* (one placeholder per differentiable output) runs those
backward formulas on tracer tensors too, so the backward ATen ops land in the
same FX graph: the joint graph. partition.py then splits it in two.
"""
from __future__ import annotations

import torch

from ..errors import Unsupported
from .tracer import meta_like


def trace_backward(tracer, outputs: list, inputs: list) -> tuple[list, int]:
    """Record d(outputs)/d(inputs) given one tangent per output.

    Returns the gradient tracer tensors (None where an input does not reach any
    output) and the number of tangent placeholders added. Tangents are
    contiguous: the runtime makes incoming gradients contiguous to match.
    """
    graph = tracer.graph
    # Inputs were added first and in order: tangents go right after them.
    placeholders = [node for node, _ in tracer.inputs if node.op == "placeholder"]
    anchor = placeholders[-1] if placeholders else None
    tangents = []
    for i, out in enumerate(outputs):
        meta = meta_like(out, contiguous=True)
        if anchor is None:
            with graph.inserting_before(next(iter(graph.nodes), None)):
                node = graph.placeholder(f"tangent_{i}")
        else:
            with graph.inserting_after(anchor):
                node = graph.placeholder(f"tangent_{i}")
        anchor = node
        tracer._set_meta(node, meta, out.device)
        tangents.append(tracer.fresh_tensor(node, meta, out.device))
    if not outputs or not inputs:
        return [None] * len(inputs), len(tangents)
    try:
        grads = torch.autograd.grad(outputs, inputs, tangents, allow_unused=True)
    except RuntimeError as e:
        if "second time" in str(e) or "does not require grad" in str(e):
            raise
        raise Unsupported(f"tracing the backward failed: {e}") from e
    return list(grads), len(tangents)

