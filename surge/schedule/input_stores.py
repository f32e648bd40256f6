"""Kernels that store a mutated input's new value into the input itself.

A graph that updates an input in place (an optimizer step: every parameter and
state tensor; a buffer update) ends with one ``copy_(input, new_value)`` per
mutated input (the aot contract). Run as written, each new value goes to a
buffer of its own and an extern copy moves it into the input: for a parameter
that is a second write and a read of every element, and one more call per tensor.

Where it is safe, the kernel that computes the new value stores it into the
input's storage directly and the copy is dropped. Safe means the input's old
value is not needed once that kernel has stored an element:

- the copy is the only write into the input, and every other step that reads it
  runs before that kernel (``consumers``; steps run in order): Adam's step counters
  are read by the parameters' kernels and incremented by a kernel after them;
- in the kernel, every read of the input is at the element being stored, before
  the store (``memory._in_place_donor``'s conditions, the input as the donor);
- the new value has the input's layout, dtype and device, and is not a graph
  output (no output may be a view of an input).

The memory plan then gives the new value the input's storage (``plan_memory``'s
``input_stores``); readers of the new value read it there.
"""
from __future__ import annotations

import torch

from ..lowering.ir import ExternBuffer, LoopGraph, TensorArg
from .fusion import consumers
from .groups import ExternStep, KernelGroup
from .memory import _in_place_donor


def copy_back(step) -> tuple[str, str] | None:
    """(input, value) of a final ``copy_(input, value)`` step, else None."""
    if not isinstance(step, ExternStep):
        return None
    buf: ExternBuffer = step.buffer
    if buf.op is not torch.ops.aten.copy_.default or buf.kwargs or len(buf.args) != 2:
        return None
    dst, src = buf.args
    if not (isinstance(dst, TensorArg) and isinstance(src, TensorArg)) or dst.layout or src.layout:
        return None
    return dst.buffer, src.buffer


def stores_into_inputs(graph: LoopGraph, steps: list, taken=frozenset()) -> tuple[list, dict]:
    """``steps`` without the copies that kernels make unnecessary, and value -> input
    for each value stored into its input; ``taken``: inputs whose storage a scatter writes
    into already (``scatter_stores.py``), which keep their copies."""
    by_name = graph.by_name
    inputs = {b.name for b in graph.inputs}
    outputs = {o.arg.buffer for o in graph.outputs if isinstance(o.arg, TensorArg)}
    users = consumers(graph, steps)
    producer = {n.name: s for s in steps if isinstance(s, KernelGroup) for n in s.nodes}
    stored: dict[str, str] = {}
    dropped = set()
    for step in steps:
        found = copy_back(step)
        if found is None:
            continue
        dst, src = found
        group = producer.get(src)
        if dst not in inputs or dst in taken or group is None or src in outputs or src not in group.stores:
            continue
        readers = users.get(dst, set()) - {step.index}
        if -1 in readers or any(k > group.index for k in readers):
            continue   # a later step (or the caller) still reads the old value
        value, target = by_name[src], by_name[dst]
        if (value.dtype, value.device) != (target.dtype, target.device) or value.layout.offset != 0:
            continue
        if tuple(value.layout.shape) != tuple(target.layout.shape) or \
                tuple(value.layout.stride) != tuple(target.layout.stride):
            continue
        if _in_place_donor(group, src, {dst}, by_name, graph.target.in_place_bf16) != dst:
            continue
        stored[src] = dst
        dropped.add(step.index)
    return [s for s in steps if s.index not in dropped], stored
