"""Buffer lifetimes and the static memory plan.

Each buffer that reaches memory is allocated by the step that writes it and
freed after the last step that reads it (graph outputs live on); ``arena.py``
then places the storages of this plan at offsets in one allocation per call. A kernel
output reuses the storage of a dead buffer of the same size, layout and
dtype instead of allocating. Dead buffers are kept for reuse only until the
next extern call: that call allocates through torch's allocator, which would
otherwise not get them back, and the peak would rise above eager's (e.g.
attention probabilities held across the next matmul).

A kernel output may also take the storage of a buffer that the same kernel
reads for the last time (*in place*: a matmul's result read by its epilogue,
``gelu(x @ w + b) + r``, as torch.compile does), when each element of that
buffer is read only to compute the output's value at that very element: each
element is then read before it is written, by the thread that writes it
(``_in_place_donor`` lists the conditions).
"""
from __future__ import annotations

import dataclasses

import sympy
import torch

from ..lowering.ir import ExternBuffer, LoopGraph
from ..lowering.size_vars import static_int
from ..lowering.sizes import contiguous_strides, product
from ..lowering.values import Op, loads_of, walk
from .arena import Arena, plan_arena
from .fusion import consumers, read_buffers
from .groups import KernelGroup


@dataclasses.dataclass
class StepMemory:
    allocate: list = dataclasses.field(default_factory=list)   # (name, reused name or None)
    free_after: list = dataclasses.field(default_factory=list)  # names dead after this step
    # graph inputs read for the last time by this step: the host drops its references, so
    # a caller that handed over its list of arguments (a backward's saved tensors) frees them
    inputs_dead_after: list = dataclasses.field(default_factory=list)

    def in_place(self) -> list:
        """Donors that this step's outputs take while the step still reads them: the host
        frees their names only after the step has run (they are in ``free_after``)."""
        return [src for _, src in self.allocate if src is not None and src in self.free_after]


@dataclasses.dataclass
class MemoryPlan:
    steps: list                 # StepMemory per step
    allocations: int = 0        # storages the plan allocates per call (arena slots included)
    reuses: int = 0             # allocations served by a dead buffer
    arena: Arena | None = None  # where those storages live: one allocation per call

    @property
    def allocator_calls(self) -> int:
        """Allocations a call makes for the plan's storages: one for the arena, one per
        storage outside it (graph outputs, large buffers)."""
        if self.arena is None:
            return self.allocations
        return self.allocations - len(self.arena.slots) + (1 if self.arena.slots else 0)

    def __str__(self) -> str:
        lines = [f"memory plan: {self.allocations} allocations, {self.reuses} reuses, "
                 f"{self.allocator_calls} allocator calls"]
        for k, sm in enumerate(self.steps):
            in_place = sm.in_place()
            allocs = ", ".join(n if r is None else f"{n}<-{r}" + (" (in place)" if r in in_place else "")
                               for n, r in sm.allocate)
            lines.append(f"  step {k}: alloc [{allocs}] free [{', '.join(sm.free_after)}]")
        if self.arena is not None and self.arena.slots:
            lines.append(str(self.arena))
        return "\n".join(lines)


def _reuse_key(buf):
    return (tuple(buf.layout.shape), tuple(buf.layout.stride), buf.layout.offset, buf.dtype, buf.device)


def _in_place_key(buf):
    """``_reuse_key`` for an in-place reuse, where a row-major buffer from its storage's
    start is known by its element count alone: a [B*T, C] matmul result and the [B, T, C]
    epilogue over it address each element alike (the host code gives the output's name a
    tensor of the output's shape over the donor's storage)."""
    lay = buf.layout
    row_major = all(n == 1 or sympy.expand(st - want) == 0
                    for n, st, want in zip(lay.shape, lay.stride, contiguous_strides(lay.shape)))
    if row_major and lay.offset == 0:
        return ("row-major", sympy.expand(product(lay.shape)), buf.dtype, buf.device)
    return _reuse_key(buf)


def _is_tuple(buf) -> bool:
    """A multi-output extern call's result: a tuple of its outputs, not storage."""
    return isinstance(buf, ExternBuffer) and buf.parent is None and not buf.layout.shape and bool(buf.op)


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


def _non_overlapping(layout) -> bool:
    """No two elements of ``layout`` share an address (a store through it is one write per element)."""
    dims = [(st, n) for n, st in zip(layout.shape, layout.stride) if n != 1]
    if all(getattr(x, "is_Integer", False) for d in dims for x in d):
        span = 1
        for st, n in sorted((abs(static_int(st)), static_int(n)) for st, n in dims):
            if st < span:
                return False
            span = st * n
        return True
    expected = 1   # symbolic sizes: only the row-major layout is known not to overlap
    for n, st in reversed(list(zip(layout.shape, layout.stride))):
        if n != 1 and sympy.expand(st - expected) != 0:
            return False
        expected = expected * n
    return True


def _rounds_to_bf16(group: KernelGroup) -> bool:
    return any(n.dtype == torch.bfloat16 or any(isinstance(v, Op) and v.op == "cast" and v.dtype == torch.bfloat16
                                                for v in walk(n.value)) for n in group.nodes)


def _in_group_reads(group: KernelGroup) -> dict:
    """Member name -> the members it reads in registers."""
    members = {n.name for n in group.nodes}
    return {n.name: read_buffers(n) & members for n in group.nodes}


def _in_place_donor(group: KernelGroup, name: str, candidates: set, by_name: dict,
                    in_place_bf16: bool) -> str | None:
    """A buffer among ``candidates`` (read for the last time by ``group``, its storage free
    to take) whose storage the output ``name`` can take while the kernel reads it:

    - the group is pointwise (no reduction, no column sum): in a reduction kernel an
      element may be read by one pass over a row and again by a later one (a looped
      softmax's epilogue reloads its input after the max and sum passes), and the C++
      row kernels cache rows and run their r loop twice (``vector16``). Per-row values
      are the exception: an ``x`` member of a reduction group is computed once per row,
      after the row's reductions, and stored there, so a donor that only such members
      read, directly or through one another (a batch norm's running mean, updated from
      the batch mean), is read before the store;
    - the donor has the output's size, layout and dtype (``_in_place_key``), and the
      layout never stores two elements at one address;
    - every member reads the donor directly (no gather) at the very element the kernel
      stores the output to; the output's value is computed from it, and no member after
      the output's producer reads it, directly or through members in registers: both
      generators compute and store a pointwise group's stored members in member order,
      so every load of the donor comes before the output's store (a store that a load
      feeds cannot be moved above it, even where the C++ kernels' ``__restrict__``
      pointers let the compiler reorder the rest);
    - on a CPU, the group rounds nothing to bf16: the C++ vector loop that rounds to bf16
      runs again as scalar code over a block where it met a NaN or denormal, and would
      read what the first run wrote.
    """
    if group.columns:
        return None
    per_row_only = group.is_reduction or bool(group.r_ranges)
    if per_row_only and group.role(group.member(name)) != "x":
        return None
    out = by_name[name]
    if out.layout.offset != 0 or not _non_overlapping(out.layout):
        return None   # an offset: the host passes a computed buffer's data pointer, not its storage's start
    if not in_place_bf16 and _rounds_to_bf16(group):
        return None
    producer = group.member(name)
    reads = _in_group_reads(group)
    up_to_output = {n.name for n in group.nodes[:group.nodes.index(producer) + 1]}
    target = group.kernel_index(producer, producer.store_index())
    for donor in sorted(candidates):
        if donor in reads or _in_place_key(by_name[donor]) != _in_place_key(out):
            continue
        direct = [(n, ld) for n in group.nodes for ld in loads_of(n.value) if ld.buffer == donor]
        if not direct or any(ld.indirect or group.kernel_index(n, ld.index) != target for n, ld in direct):
            continue
        dependent = {n.name for n, _ in direct}
        for node in group.nodes:   # dependency order: readers of readers come later
            if reads[node.name] & dependent:
                dependent.add(node.name)
        if per_row_only and any(group.role(group.member(d)) != "x" for d in dependent):
            continue
        if name in dependent and dependent <= up_to_output:
            return donor
    return None


def last_input_reads(graph: LoopGraph, steps: list) -> dict[str, int]:
    """Graph input -> the position (in ``steps``) of the last step that names it. A buffer
    allocated over an input's storage (``name = arg0  # reuse``) takes the input's place,
    but a later step may still name the input itself (an extern copy back into it): the
    host writers keep the input's name until then."""
    inputs = {b.name for b in graph.inputs}
    last: dict[str, int] = {}
    for position, step in enumerate(steps):
        bufs = step.nodes if isinstance(step, KernelGroup) else [step.buffer]
        for b in bufs:
            for name in read_buffers(b) & inputs:
                last[name] = position
    return last


def plan_memory(graph: LoopGraph, steps: list, input_stores: dict | None = None,
                scatter_storage: dict | None = None) -> MemoryPlan:
    """``input_stores``: kernel outputs stored into a mutated input's storage (value name ->
    input name, ``input_stores.py``): allocated as that input, freed as it is.
    ``scatter_storage``: scatter name -> the buffer whose storage it writes into
    (``scatter_stores.py``): allocated in place of that buffer, which lives until then."""
    input_names = {b.name for b in graph.inputs}
    scatter_storage = scatter_storage or {}
    input_stores = {**(input_stores or {}), **{s: b for s, b in scatter_storage.items() if b in input_names}}
    scatters = {s: b for s, b in scatter_storage.items() if b not in input_names}
    stored_inputs = set(input_stores.values())
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
    for k, step in enumerate(steps):   # a scatter's storage lives (unused) until the scatter runs
        for name in (step.stores if isinstance(step, KernelGroup) else ()):
            if name in scatters:
                last_use[scatters[name]] = max(last_use.get(scatters[name], k), k)
    bases = {base for buf in graph.buffers if _may_alias(buf) for base in read_buffers(buf)}
    pool: dict[tuple, list] = {}
    taken_in_place = set(scatters.values())
    plan = MemoryPlan([StepMemory() for _ in steps])
    for k, step in enumerate(steps):
        sm = plan.steps[k]
        if not isinstance(step, KernelGroup):
            pool.clear()  # freed for real at their last use: the extern's allocation may take them
        if isinstance(step, KernelGroup):
            # read for the last time here, storage of their own: an output may take one in place
            dying = {name for name, last in last_use.items() if last == k and name not in input_names
                     and name not in views and name not in bases and not _is_tuple(by_name[name])}
            for name in step.stores:
                buf = by_name[name]
                if name in input_stores:   # the input's own storage, read by this very kernel
                    sm.allocate.append((name, input_stores[name]))
                    sm.free_after.append(input_stores[name])
                    plan.reuses += 1
                    continue
                if name in scatters:   # the storage of the buffer it updates
                    sm.allocate.append((name, scatters[name]))
                    plan.reuses += 1
                    continue
                free = pool.get(_reuse_key(buf))
                donor = None if free else _in_place_donor(step, name, dying - taken_in_place, by_name,
                                                               graph.target.in_place_bf16)
                if free:
                    sm.allocate.append((name, free.pop()))
                    plan.reuses += 1
                elif donor is not None:
                    sm.allocate.append((name, donor))
                    taken_in_place.add(donor)
                    plan.reuses += 1
                else:
                    sm.allocate.append((name, None))
                    plan.allocations += 1
        for name, last in last_use.items():
            if last == k and name in input_names and name not in stored_inputs:
                sm.inputs_dead_after.append(name)
            if last == k and name not in input_names:
                sm.free_after.append(name)
                if _is_tuple(by_name[name]):
                    continue  # a multi-output call's tuple, not storage
                if name in input_stores:
                    continue  # its storage is a graph input's
                if name in views:
                    continue  # its storage is its base's
                if name in taken_in_place:
                    continue  # its storage is now the output's that took it
                pool.setdefault(_reuse_key(by_name[name]), []).append(name)
    plan.arena = plan_arena(graph, plan, graph.target)
    return plan
