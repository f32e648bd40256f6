"""Buffer lifetimes and the static memory plan.

Each buffer that reaches memory is allocated by the step that writes it and
freed after the last step that reads it (graph outputs live on). A kernel
output reuses the storage of a dead buffer of the same size, layout and
dtype instead of allocating; a buffer is never reused by the step that reads
it last, so no kernel writes memory it is still reading. Dead buffers are kept
for reuse only until the next extern call: that call allocates through torch's
allocator, which would otherwise not get them back, and the peak would rise
above eager's (e.g. attention probabilities held across the next matmul).
"""
from __future__ import annotations

import dataclasses

import torch

from ..lowering.ir import ExternBuffer, LoopGraph
from .fusion import consumers, read_buffers
from .groups import KernelGroup


@dataclasses.dataclass
class StepMemory:
    allocate: list = dataclasses.field(default_factory=list)   # (name, reused name or None)
    free_after: list = dataclasses.field(default_factory=list)  # names dead after this step
    # graph inputs read for the last time by this step: the host drops its references, so
    # a caller that handed over its list of arguments (a backward's saved tensors) frees them
    inputs_dead_after: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class MemoryPlan:
    steps: list                 # StepMemory per step
    allocations: int = 0        # fresh allocations per call
    reuses: int = 0             # allocations served by a dead buffer

    def __str__(self) -> str:
        lines = [f"memory plan: {self.allocations} allocations, {self.reuses} reuses"]
        for k, sm in enumerate(self.steps):
            allocs = ", ".join(n if r is None else f"{n}<-{r}" for n, r in sm.allocate)
            lines.append(f"  step {k}: alloc [{allocs}] free [{', '.join(sm.free_after)}]")
        return "\n".join(lines)


def _reuse_key(buf):
    return (tuple(buf.layout.shape), tuple(buf.layout.stride), buf.layout.offset, buf.dtype, buf.device)


def _may_alias(buf) -> bool:
    """An extern call whose result may share storage with its arguments (a view)."""
    if not isinstance(buf, ExternBuffer):
        return False
    if buf.parent is not None:
        return True   # an element of a multi-output result: checked through its parent
    if not isinstance(buf.op, torch._ops.OpOverload):
        return True   # unknown callable: assume it returns a view
    return any(r.alias_info is not None for r in buf.op._schema.returns)


def _keep_bases_alive(graph: LoopGraph, users: dict, last_use: dict) -> set:
    """A view made by an extern call holds its base's storage: the base lives as
    long as its views (forever when a view is a graph output). Returns the views,
    whose storage is not theirs to reuse."""
    views = set()
    outputs = {name for name, readers in users.items() if -1 in readers}
    for buf in reversed(graph.buffers):   # views of views first, so lifetimes chain
        if not _may_alias(buf):
            continue
        views.add(buf.name)
        for base in read_buffers(buf):
            if buf.name in outputs:
                outputs.add(base)
                last_use.pop(base, None)
            elif base in last_use and buf.name in last_use:
                last_use[base] = max(last_use[base], last_use[buf.name])
    return views


def plan_memory(graph: LoopGraph, steps: list) -> MemoryPlan:
    users = consumers(graph, steps)
    by_name = graph.by_name
    in_memory = {b.name for b in graph.inputs}
    for step in steps:
        in_memory.update(step.stores if isinstance(step, KernelGroup) else [step.buffer.name])
    last_use: dict[str, int] = {}
    for name, readers in users.items():
        if -1 not in readers and name in in_memory:
            last_use[name] = max(readers)
    for k, step in enumerate(steps):
        for name in (step.stores if isinstance(step, KernelGroup) else [step.buffer.name]):
            if name not in users:            # written but never read: dead at once
                last_use.setdefault(name, k)
    views = _keep_bases_alive(graph, users, last_use)
    input_names = {b.name for b in graph.inputs}
    pool: dict[tuple, list] = {}
    plan = MemoryPlan([StepMemory() for _ in steps])
    for k, step in enumerate(steps):
        sm = plan.steps[k]
        if not isinstance(step, KernelGroup):
            pool.clear()  # freed for real at their last use: the extern's allocation may take them
        if isinstance(step, KernelGroup):
            for name in step.stores:
                buf = by_name[name]
                free = pool.get(_reuse_key(buf))
                if free:
                    sm.allocate.append((name, free.pop()))
                    plan.reuses += 1
                else:
                    sm.allocate.append((name, None))
                    plan.allocations += 1
        for name, last in last_use.items():
            if last == k and name in input_names:
                sm.inputs_dead_after.append(name)
            if last == k and name not in input_names:
                sm.free_after.append(name)
                buf = by_name[name]
                if isinstance(buf, ExternBuffer) and buf.parent is None and not buf.layout.shape and buf.op:
                    continue  # a multi-output call's tuple, not storage
                if name in views:
                    continue  # its storage is its base's
                pool.setdefault(_reuse_key(buf), []).append(name)
    return plan
