"""Fusion: group the loop graph's buffers into kernels.

One pass over the buffers in dependency order. Each computed buffer joins the
existing kernel group it shares the most data with (its producers, or the
same inputs) when the fusion is legal, else starts a new group:

- the iteration spaces agree (``groups.node_role`` gives the buffer a role);
- every read of a buffer computed in the group is at the element the group
  computes at that point (same kernel index), so it comes from registers;
- everything else it reads is ready before the group runs.

Vertical fusion (producer into consumer), reductions with their prologues
and epilogues, and horizontal fusion (siblings reading the same data, or results
of one kernel: the second stages of two split sums) all come from this one rule.
Nothing is recomputed: each member is computed once.
"""
from __future__ import annotations

import collections

from ..lowering.ir import ComputedBuffer, ExternBuffer, LoopGraph, ScatterBuffer, TensorArg
from ..lowering.sizes import product
from ..lowering.values import loads_of
from .groups import ExternStep, KernelGroup, node_role


def read_buffers(buf) -> set:
    """Names of the buffers ``buf`` reads (a scatter: also the buffer it writes into, whose
    values it keeps, so it runs after that buffer is computed)."""
    if isinstance(buf, ScatterBuffer):
        return {ld.buffer for ld in loads_of(buf.value)} | {buf.into}
    if isinstance(buf, ComputedBuffer):
        return {ld.buffer for ld in loads_of(buf.value)}
    names = set()
    if buf.parent is not None:
        names.add(buf.parent)

    def visit(a):
        if isinstance(a, TensorArg):
            names.add(a.buffer)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
    visit(list(buf.args))
    visit(list(buf.kwargs.values()))
    return names


# A reduction kernel runs one program per block of rows. Pointwise work over
# x + r joins it only when there are enough rows to fill the GPU, or the whole
# thing is small: else a parallel pointwise kernel would run in a few programs.
MIN_ROWS_FOR_ROW_FUSION = 16
SMALL_KERNEL_ELEMENTS = 65536


def _row_fusion_ok(x, r, sizes) -> bool:
    """A heuristic over the sizes' hints: either choice is right for every size."""
    rows, row = sizes.size_hint(product(x)), sizes.size_hint(product(r))
    return rows >= MIN_ROWS_FOR_ROW_FUSION or rows * row <= SMALL_KERNEL_ELEMENTS


def _join_space(group: KernelGroup, node: ComputedBuffer, sizes):
    """The group's (x, r) space once ``node`` joins, or None if they do not fit."""
    role = node_role(node, group.x_ranges, group.r_ranges)
    if role == "xr" and not _row_fusion_ok(group.x_ranges, group.r_ranges, sizes):
        return None
    if role:
        return group.x_ranges, group.r_ranges
    if node.is_reduction and not group.r_ranges:
        x, r = tuple(node.ranges), tuple(node.reduction_ranges)
        roles = [node_role(m, x, r) for m in group.nodes]
        if all(role in ("x", "xr") for role in roles) and ("xr" not in roles or _row_fusion_ok(x, r, sizes)):
            return x, r
    return None


def _reads_in_registers(group: KernelGroup, node: ComputedBuffer) -> bool:
    """Every read of a group member is at the element the kernel holds for it."""
    for ld in loads_of(node.value):
        producer = group.member(ld.buffer)
        if producer is None:
            continue
        if ld.indirect or isinstance(producer, ScatterBuffer):   # a scatter's result: memory, all of it
            return False
        prole, nrole = group.role(producer), group.role(node)
        if prole == "xr" and nrole == "x":
            return False
        if group.kernel_index(node, ld.index) != group.kernel_index(producer, producer.store_index()):
            return False
    return True


def scatter_conflict(group: KernelGroup, node: ComputedBuffer) -> bool:
    """A scatter and what computes or reads the buffer it writes into are never in one
    kernel: its threads would store elements that others still read or write."""
    if isinstance(node, ScatterBuffer):
        return any(m.name == node.into or node.into in read_buffers(m) for m in group.nodes)
    into = {m.into for m in group.nodes if isinstance(m, ScatterBuffer)}
    return bool(into) and (node.name in into or bool(into & read_buffers(node)))


def _fits(group: KernelGroup, node: ComputedBuffer, producer_step: dict, sizes) -> bool:
    space = _join_space(group, node, sizes)
    if space is None or scatter_conflict(group, node):
        return False
    for name in read_buffers(node):
        step = producer_step.get(name)
        if step is not None and step > group.index:
            return False
    old = group.x_ranges, group.r_ranges
    group.x_ranges, group.r_ranges = space
    try:
        ok = _reads_in_registers(group, node)
    finally:
        group.x_ranges, group.r_ranges = old
    return ok


def fuse(graph: LoopGraph) -> list:
    """The steps (KernelGroup / ExternStep) of ``graph`` in execution order."""
    steps: list = []
    producer_step: dict[str, int] = {}
    group_reads: dict[int, set] = {}
    group_kernels: dict[int, set] = {}   # the kernel groups whose results a group reads
    for buf in graph.buffers:
        if isinstance(buf, ExternBuffer):
            step = ExternStep(len(steps), buf)
            steps.append(step)
            producer_step[buf.name] = step.index
            continue
        reads = read_buffers(buf)
        read_kernels = _kernels_read(reads, producer_step, steps)
        best, best_score = None, 0
        for step in steps:
            if not isinstance(step, KernelGroup):
                continue
            members = {n.name for n in step.nodes}
            score = 2 * len(reads & members) + len(reads & group_reads[step.index])
            if not score and read_kernels & group_kernels[step.index]:
                score = 0.5   # siblings: both read results of one kernel
            if score > best_score and _fits(step, buf, producer_step, graph.sizes):
                best, best_score = step, score
        if best is None:
            best = _small_pointwise_sibling(steps, buf, producer_step, graph.sizes)
        if best is None:
            best = KernelGroup(len(steps), tuple(buf.ranges),
                               tuple(buf.reduction_ranges) if buf.is_reduction else (), [])
            steps.append(best)
            group_reads[best.index] = set()
            group_kernels[best.index] = set()
        else:
            best.x_ranges, best.r_ranges = _join_space(best, buf, graph.sizes)
        best.nodes.append(buf)
        group_reads[best.index] |= reads
        group_kernels[best.index] |= read_kernels
        producer_step[buf.name] = best.index
    merge_groups(steps, producer_step, graph.sizes)
    return steps


def _small_pointwise_sibling(steps: list, buf: ComputedBuffer, producer_step: dict, sizes):
    """A pointwise group over exactly ``buf``'s small space that ``buf`` fits, though they
    share no data: each such kernel costs a launch for a few elements (a batch norm's step
    counter, one per layer)."""
    if buf.is_reduction or sizes.size_hint(product(buf.ranges)) > SMALL_KERNEL_ELEMENTS:
        return None
    for step in reversed(steps):
        if (isinstance(step, KernelGroup) and not step.is_reduction and not step.r_ranges
                and tuple(step.x_ranges) == tuple(buf.ranges) and _fits(step, buf, producer_step, sizes)):
            return step
    return None


def _kernels_read(reads: set, producer_step: dict, steps: list) -> set:
    """The kernel groups that computed any of ``reads``."""
    return {producer_step[n] for n in reads
            if n in producer_step and isinstance(steps[producer_step[n]], KernelGroup)}


def merge_groups(steps: list, producer_step: dict, sizes) -> None:
    """Move a group into a later one it shares data with, when nothing between reads it.

    The pass above puts a buffer that shares nothing with the groups so far into a
    group of its own. A later buffer may then read from two groups over the same
    rows: in a LayerNorm backward, ``sum(dy * w)`` starts a group, ``xhat`` (which
    reads x and the statistics, nothing of that group) starts another, and
    ``sum(dy * w * xhat)`` joins xhat's; without this, two kernels read ``dy``.
    Each group is tried against the later groups that read what it reads or
    computes, nearest first; its members go to the front of the one they fit.
    """
    groups = [s for s in steps if isinstance(s, KernelGroup)]
    readers: dict[str, list] = {}     # buffer name -> later groups reading it, in order
    for g in groups:
        for name in set().union(*(read_buffers(n) for n in g.nodes)):
            readers.setdefault(name, []).append(g)
    step_reads = [read_buffers(s.buffer) if isinstance(s, ExternStep) else
                  set().union(*(read_buffers(n) for n in s.nodes)) for s in steps]
    for a in groups:
        if not a.nodes:
            continue
        names = {n.name for n in a.nodes}
        shared = names | step_reads[a.index]
        candidates = sorted({g.index: g for name in shared for g in readers.get(name, ())
                             if g.index > a.index and g.nodes}.items())
        for _, g in candidates:
            if any(step_reads[k] & (shared if _mutates(steps[k]) else names) for k in range(a.index + 1, g.index)):
                break   # a step before g reads a's results, or writes what a reads
            merged = _merged(a, g, producer_step, sizes)
            if merged is None:
                continue
            for n in a.nodes:
                producer_step[n.name] = g.index
            g.nodes, (g.x_ranges, g.r_ranges) = merged
            step_reads[g.index] |= step_reads[a.index]
            a.nodes = []
            break


def _mutates(step) -> bool:
    """An extern call that writes into one of its arguments (a copy into a mutated input)."""
    schema = getattr(step.buffer.op, "_schema", None) if isinstance(step, ExternStep) else None
    return schema is not None and schema.is_mutable


def _merged(a: KernelGroup, g: KernelGroup, producer_step: dict, sizes):
    """(nodes, (x_ranges, r_ranges)) of ``a``'s members followed by ``g``'s in one group
    at ``g``'s place, or None when one of them does not fit there."""
    trial = KernelGroup(g.index, a.x_ranges, a.r_ranges, list(a.nodes))
    steps = collections.ChainMap({n.name: g.index for n in a.nodes}, producer_step)
    for node in g.nodes:
        if not _fits(trial, node, steps, sizes):
            return None
        trial.x_ranges, trial.r_ranges = _join_space(trial, node, sizes)
        trial.nodes.append(node)
    return trial.nodes, (trial.x_ranges, trial.r_ranges)


def consumers(graph: LoopGraph, steps: list) -> dict:
    """buffer name -> set of step indices that read it (-1: a graph output)."""
    users: dict[str, set] = {}
    for step in steps:
        bufs = step.nodes if isinstance(step, KernelGroup) else [step.buffer]
        for b in bufs:
            for name in read_buffers(b):
                users.setdefault(name, set()).add(step.index)
    for out in graph.outputs:
        if isinstance(out.arg, TensorArg):
            users.setdefault(out.arg.buffer, set()).add(-1)
    return users


def mark_stores(graph: LoopGraph, steps: list, kept=()) -> None:
    """Decide which group results go to memory; the rest stay in registers. ``kept``:
    results stored though no step reads them (values stored into a mutated input)."""
    users = consumers(graph, steps)
    for step in steps:
        if not isinstance(step, KernelGroup):
            continue
        for node in step.nodes:
            readers = users.get(node.name, set())
            if node.name in kept or (readers and not readers <= {step.index}):
                step.stores.append(node.name)
            elif readers:
                step.internal.append(node.name)
        step.nodes = [n for n in step.nodes if n.name in step.stores or n.name in step.internal]


def name_groups(steps: list) -> None:
    """Kernel names from the ops they fuse: ``fused_add_gelu_0``."""
    for k, step in enumerate(s for s in steps if isinstance(s, KernelGroup)):
        ops = step.origins()[:4] or ["kernel"]
        step.name = "fused_" + "_".join(o.lstrip("_") for o in ops) + f"_{k}"
