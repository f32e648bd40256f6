"""Column sums into the row kernel that computes their operands (a CPU refinement).

A training step's backward sums over the batch dim what a LayerNorm-backward
row kernel has just computed: the LayerNorm weight and bias gradients
(``sum(dy * xhat, 0)``, ``sum(dy, 0)``) and the Linear bias gradient
(``sum(grad, 0)``). The shared fusion pass cannot put them into that kernel: the
row kernel's x loop runs over rows and its r loop along a row, while a column sum
keeps one result per column and reduces over rows. They become kernels of their
own that read the row kernel's operands again and recompute its math (GELU's
derivative: an ``erf`` and an ``exp`` per element), or make it store an
intermediate just for them.

A CPU thread can do better: it runs a block of whole rows, so it can add each
element into a per-thread array of column partials while the row is in registers,
and the partials of the threads are combined once at the end. This pass, applied
by the C++ code generator, moves each such sum into the row kernel that shares the
most data with it, where everything it reads is either a member of that kernel read
at the element the kernel holds, or in memory before the kernel runs. A sum may
also move to a later row kernel when it reads nothing of its own kernel and nothing
reads it before that one runs. The member's role is ``column`` (``groups.py``).
Stores and the memory plan are then decided again: a value that was stored only
for the column kernel stays in registers.

GPU kernels run rows in many programs, which would need a second pass over
partials; the Triton backend keeps the separate kernels.
"""
from __future__ import annotations

import dataclasses

from ..lowering.ir import ComputedBuffer
from ..lowering.size_vars import static_int
from ..lowering.sizes import index_symbol, linear_coefficient
from ..lowering.values import loads_of
from .fusion import consumers, mark_stores, name_groups, read_buffers, scatter_conflict
from .groups import KernelGroup, column_runs
from .memory import plan_memory
from .scheduler import Schedule

# Each thread keeps a partial per column and member: at most this many columns.
MAX_COLUMNS = 16384


def _is_column_candidate(node: ComputedBuffer) -> bool:
    return (node.is_reduction and node.reduction_type == "sum" and node.dtype.is_floating_point
            and node.acc_dtype.is_floating_point)


def _along_row(group: KernelGroup, node: ComputedBuffer, index) -> object:
    """The stride of ``node``'s read at ``index`` along the group's innermost r loop (None: not affine)."""
    return linear_coefficient(group.kernel_index(node, index), index_symbol("r", len(group.r_ranges) - 1))


def _is_row_kernel(group: KernelGroup) -> bool:
    """Most of the group's memory reads run along its rows (else the code generator
    makes it a column-layout kernel, which column members cannot join)."""
    along, across = 0, 0
    for member in group.nodes:
        for ld in loads_of(member.value):
            if group.member(ld.buffer) is None and not ld.indirect:
                stride = _along_row(group, member, ld.index)
                along += stride == 1
                across += stride not in (0, 1)
    return along >= across


def _joins(group: KernelGroup, node: ComputedBuffer, producer_step: dict) -> bool:
    """``node`` can be a column member of ``group``: sizes line up, member reads are
    at the kernel's element, everything else is ready before the group runs."""
    if not group.r_ranges or column_runs(node, group.x_ranges, group.r_ranges) is None:
        return False
    if not _is_row_kernel(group):
        return False
    if not all(getattr(n, "is_Integer", False) for n in group.x_ranges):
        return False   # the C++ column sums split the rows among threads by number
    columns = 1
    for size in group.r_ranges:
        if not getattr(size, "is_Integer", False):
            return False
        columns *= static_int(size)
    if columns > MAX_COLUMNS:
        return False
    group.columns.add(node.name)
    try:
        for ld in loads_of(node.value):
            producer = group.member(ld.buffer)
            if producer is None:
                step = producer_step.get(ld.buffer)
                if step is not None and step >= group.index:
                    return False
                # the row kernel reads along its rows; a read across them would be a gather
                if ld.indirect or _along_row(group, node, ld.index) not in (0, 1):
                    return False
                continue
            if ld.indirect or producer.name in group.columns:
                return False
            if group.kernel_index(node, ld.index) != group.kernel_index(producer, producer.store_index()):
                return False
        return True
    finally:
        group.columns.discard(node.name)


def _shared_data(group: KernelGroup, node: ComputedBuffer) -> int:
    """How much ``node`` reads of what ``group`` computes (counted twice) or reads."""
    reads = read_buffers(node)
    members = {n.name for n in group.nodes}
    group_reads = set().union(*(read_buffers(n) for n in group.nodes))
    return 2 * len(reads & members) + len(reads & group_reads)


def fuse_column_reductions(schedule: Schedule) -> Schedule:
    """``schedule`` with column sums moved into row kernels; the same schedule when none moves."""
    steps = [dataclasses.replace(s, nodes=list(s.nodes), stores=[], internal=[], columns=set(s.columns))
             if isinstance(s, KernelGroup) else s for s in schedule.steps]
    producer_step = {}
    for step in steps:
        for node in (step.nodes if isinstance(step, KernelGroup) else [step.buffer]):
            producer_step[node.name] = step.index
    users = consumers(schedule.graph, steps)
    # a kernel that stores into a mutated input was found safe to do so as it is
    # (input_stores.py): no column sum joins or leaves it (one that left could run after it
    # and read the input's new value), and its value stays stored with no copy back reading it
    storing = {producer_step[value] for value in schedule.input_stores}
    # a buffer a scatter writes into has its old value only until the scatter runs: a
    # sum reading it moves to no later kernel, nor into a kernel with the scatter
    overwritten = set(schedule.scatter_storage.values())
    moved = False
    for step in steps:
        if not isinstance(step, KernelGroup) or step.index in storing:
            continue
        for node in list(step.nodes):
            if not _is_column_candidate(node) or node.name in step.columns:
                continue   # not a sum, or moved here already
            own = {n.name for n in step.nodes}
            if any(node.name in read_buffers(n) for n in step.nodes if n is not node):
                continue   # an epilogue in its own kernel reads it: leave the kernel whole
            first_reader = min((k for k in users.get(node.name, ()) if k >= 0), default=len(steps))
            later_ok = not (read_buffers(node) & (own | overwritten))
            hosts = [g for g in steps
                     if isinstance(g, KernelGroup) and g is not step and g.nodes and g.index not in storing and
                     (g.index < step.index or (later_ok and g.index < first_reader)) and
                     _shared_data(g, node) and not scatter_conflict(g, node) and _joins(g, node, producer_step)]
            if not hosts:
                continue
            host = max(hosts, key=lambda g: (_shared_data(g, node), -g.index))
            step.nodes.remove(node)
            host.nodes.append(node)
            host.columns.add(node.name)
            producer_step[node.name] = host.index
            moved = True
    if not moved:
        return schedule
    mark_stores(schedule.graph, steps, kept=schedule.kept())
    steps = [s for s in steps if not isinstance(s, KernelGroup) or s.nodes]
    for k, s in enumerate(steps):
        s.index = k
    name_groups(steps)
    memory = plan_memory(schedule.graph, steps, schedule.input_stores, schedule.scatter_storage)
    return dataclasses.replace(schedule, steps=steps, memory=memory)
