"""The scheduling pipeline: fuse, decide what reaches memory, name kernels, plan memory."""
from __future__ import annotations

import dataclasses

from .. import logs
from ..lowering.ir import LoopGraph
from ..observe.phases import phase_timer
from ..passes.pipeline import PassContext, PassStep, Pipeline, run_pipeline
from .fusion import fuse, mark_stores, name_groups
from .groups import KernelGroup
from .input_stores import stores_into_inputs
from .memory import MemoryPlan, plan_memory
from .scatter_stores import scatters_in_place


@dataclasses.dataclass
class Schedule:
    graph: LoopGraph
    steps: list          # KernelGroup / ExternStep, in execution order
    memory: MemoryPlan | None    # None until the plan_memory step
    # kernel outputs stored into a mutated input's storage: value -> input (input_stores.py)
    input_stores: dict = dataclasses.field(default_factory=dict)
    # scatters: scatter -> the buffer whose storage it writes into (scatter_stores.py)
    scatter_storage: dict = dataclasses.field(default_factory=dict)

    def input_written(self, name: str) -> str | None:
        """The graph input whose storage the stored result ``name`` goes into, or None."""
        inputs = {b.name for b in self.graph.inputs}
        while name not in inputs:
            if name in self.input_stores:
                return self.input_stores[name]
            if self.scatter_storage.get(name, name) == name:
                return None
            name = self.scatter_storage[name]
        return name

    def kept(self) -> set:
        """Results stored though no step may read them: values stored into inputs, scatters
        and the buffers they write into."""
        return set(self.input_stores) | set(self.scatter_storage) | set(self.scatter_storage.values())

    @property
    def kernels(self) -> list:
        return [s for s in self.steps if isinstance(s, KernelGroup)]

    @property
    def externs(self) -> list:
        return [s for s in self.steps if not isinstance(s, KernelGroup)]

    def __str__(self) -> str:
        return "\n".join([str(s) for s in self.steps] + [str(self.memory)])


def _fuse(schedule: Schedule, ctx) -> Schedule:
    return Schedule(schedule.graph, fuse(schedule.graph), None)


def _scatter_stores(schedule: Schedule, ctx) -> Schedule:
    # the groups are the ones this pipeline's fuse step made: edited in place
    steps, storage = scatters_in_place(schedule.graph, schedule.steps)
    return Schedule(schedule.graph, steps, None, scatter_storage=storage)


def _mark_stores(schedule: Schedule, ctx) -> Schedule:
    mark_stores(schedule.graph, schedule.steps, kept=schedule.kept())
    # a mutated input's new value stored into the input itself: its copy back goes
    steps, stores = stores_into_inputs(schedule.graph, schedule.steps, set(schedule.scatter_storage.values()))
    steps = [s for s in steps if not isinstance(s, KernelGroup) or s.nodes]
    for k, s in enumerate(steps):
        s.index = k
    return Schedule(schedule.graph, steps, None, stores, schedule.scatter_storage)


def _name_kernels(schedule: Schedule, ctx) -> Schedule:
    name_groups(schedule.steps)
    return schedule


def _plan_memory(schedule: Schedule, ctx) -> Schedule:
    memory = plan_memory(schedule.graph, schedule.steps, schedule.input_stores, schedule.scatter_storage)
    return dataclasses.replace(schedule, memory=memory)


def _text(schedule: Schedule) -> str:
    return "\n".join(str(s) for s in schedule.steps) + ("" if schedule.memory is None else "\n" + str(schedule.memory))


# The schedule's pipeline: a Schedule with no steps yet (the loop graph alone) in, the
# finished one out. The loop graph is only read.
SCHEDULE = Pipeline("schedule", (
    PassStep("fuse", _fuse),                  # buffers into kernel groups and extern steps
    PassStep("scatter_stores", _scatter_stores),   # scatters into the tensors they update, no copies
    PassStep("mark_stores", _mark_stores),    # which results reach memory (and where); empty groups go
    PassStep("name_kernels", _name_kernels),  # fused_add_gelu_0: after the ops they fuse
    PassStep("plan_memory", _plan_memory),    # buffer lifetimes, reuse, in-place updates
), render=_text, size=lambda schedule: len(schedule.steps), suffix="txt", unit="steps", channel="schedule")


@phase_timer.phase("scheduling")
def schedule_graph(graph: LoopGraph, options=None) -> Schedule:
    """``graph`` scheduled by the ``SCHEDULE`` pipeline; ``options``: the compile's Options
    (the pipeline's debug dumps)."""
    schedule = run_pipeline(Schedule(graph, [], None), PassContext(graph_name="schedule", options=options),
                            SCHEDULE)
    logs.log("schedule", "\n" + str(schedule))
    return schedule
