"""The scheduling pipeline: fuse, decide what reaches memory, name kernels, plan memory."""
from __future__ import annotations

import dataclasses

from .. import logs
from ..lowering.ir import LoopGraph
from ..observe.phases import phase_timer
from .fusion import fuse, mark_stores, name_groups
from .groups import KernelGroup
from .memory import MemoryPlan, plan_memory


@dataclasses.dataclass
class Schedule:
    graph: LoopGraph
    steps: list          # KernelGroup / ExternStep, in execution order
    memory: MemoryPlan

    @property
    def kernels(self) -> list:
        return [s for s in self.steps if isinstance(s, KernelGroup)]

    @property
    def externs(self) -> list:
        return [s for s in self.steps if not isinstance(s, KernelGroup)]

    def __str__(self) -> str:
        return "\n".join([str(s) for s in self.steps] + [str(self.memory)])


@phase_timer.phase("scheduling")
def schedule_graph(graph: LoopGraph) -> Schedule:
    steps = fuse(graph)
    mark_stores(graph, steps)
    steps = [s for s in steps if not isinstance(s, KernelGroup) or s.nodes]
    for k, s in enumerate(steps):
        s.index = k
    name_groups(steps)
    schedule = Schedule(graph, steps, plan_memory(graph, steps))
    logs.log("schedule", "\n" + str(schedule))
    return schedule
