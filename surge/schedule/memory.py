"""Buffer lifetimes and the static memory plan.

Each buffer that reaches memory is allocated by the step that writes it and
freed after the last step that reads it (graph outputs live on). A kernel
output reuses the storage of a dead buffer of the same size, layout and
dtype instead of allocating; a buffer is never reused by the step that reads
it last, so no kernel writes memory it is still reading.
"""
from __future__ import annotations

import dataclasses

from ..lowering.ir import ExternBuffer, LoopGraph
from .fusion import consumers
from .groups import KernelGroup


@dataclasses.dataclass
class StepMemory:
    allocate: list = dataclasses.field(default_factory=list)   # (name, reused name or None)
    free_after: list = dataclasses.field(default_factory=list)  # names dead after this step


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
    input_names = {b.name for b in graph.inputs}
    pool: dict[tuple, list] = {}
    plan = MemoryPlan([StepMemory() for _ in steps])
    for k, step in enumerate(steps):
        sm = plan.steps[k]
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
            made = list(step.stores)
        else:
            made = [step.buffer.name]
        for name in made:
            if name not in users:            # written but never read: dead at once
                last_use.setdefault(name, k)
        for name, last in last_use.items():
            if last == k and name not in input_names:
                sm.free_after.append(name)
                buf = by_name[name]
                if isinstance(buf, ExternBuffer) and buf.parent is None and not buf.layout.shape and buf.op:
                    continue  # a multi-output call's tuple, not storage
                pool.setdefault(_reuse_key(buf), []).append(name)
    return plan
