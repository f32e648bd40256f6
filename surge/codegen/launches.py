"""A compiled graph as plain data: its inputs and outputs with layouts, and its launches.

Both host writers put these tables into the generated module (``INPUTS``, ``OUTPUTS``,
``LAUNCHES``, ``MEMORY``), next to the code that runs them, so a module loaded from a cache
describes itself as a freshly generated one does. The driver's ``Executable`` hands them
on: the debug dir prints them (``launches.txt``), and whatever records a graph's work
(a CUDA graph, a profiler) reads what runs in which order without parsing code.

Every entry is made of str, int, bool, lists and dicts only.
"""
from __future__ import annotations

from ..lowering.ir import ExternBuffer, GraphOutput, LoopGraph, TensorArg
from ..lowering.values import Load, walk
from ..schedule.groups import KernelGroup
from ..schedule.scheduler import Schedule


def _size(value):
    """A size or stride: an int when it is a number, its text when it is an expression."""
    return int(value) if getattr(value, "is_Integer", False) or isinstance(value, int) else str(value)


def layout_entry(name: str, layout, dtype) -> dict:
    return {"name": name, "shape": [_size(v) for v in layout.shape], "stride": [_size(v) for v in layout.stride],
            "offset": _size(layout.offset), "dtype": str(dtype).replace("torch.", "")}


def _tensor_args(args) -> list:
    found = []
    for a in args:
        if isinstance(a, TensorArg):
            found.append(a.buffer)
        elif isinstance(a, (list, tuple)):
            found.extend(_tensor_args(a))
    return found


def _kernel_reads(group: KernelGroup) -> list:
    members = {n.name for n in group.nodes}
    reads = []
    for node in group.nodes:
        for value in walk(node.value):
            if isinstance(value, Load) and value.buffer not in members and value.buffer not in reads:
                reads.append(value.buffer)
    return reads


def launch_table(schedule: Schedule, kernel_name, segment_of=None) -> list:
    """The steps in run order: ``{"kind": "kernel", "name", "reads", "writes", "into"}`` for a
    generated kernel (``kernel_name(group)`` is its name in the module; ``segment_of(group)``
    the library function that runs it, for targets that batch kernels; ``into``: the
    written results that go into a graph input's storage, and that input), and ``{"kind":
    "extern", "name", "op", "reads"}`` for an ATen call."""
    out = []
    for step in schedule.steps:
        if isinstance(step, KernelGroup):
            into = {name: schedule.input_written(name) for name in step.stores}
            entry = {"kind": "kernel", "name": kernel_name(step), "reads": _kernel_reads(step),
                     "writes": list(step.stores), "into": {k: v for k, v in into.items() if v is not None}}
            if segment_of is not None:
                entry["segment"] = segment_of(step)
            out.append(entry)
            continue
        buf: ExternBuffer = step.buffer
        if buf.parent is not None:   # an element of a multi-output call: no launch of its own
            continue
        out.append({"kind": "extern", "name": buf.name, "op": str(buf.op),
                    "reads": _tensor_args(list(buf.args) + list(buf.kwargs.values()))})
    return out


def io_tables(graph: LoopGraph) -> tuple:
    """(inputs, outputs): every input's layout; every output's buffer and layout, or its
    literal value (``{"value": ...}``) for a non-tensor output."""
    inputs = [layout_entry(b.name, b.layout, b.dtype) for b in graph.inputs]
    outputs = []
    by_name = graph.by_name
    for out in graph.outputs:
        arg = out.arg if isinstance(out, GraphOutput) else out
        if isinstance(arg, TensorArg):
            buf = by_name[arg.buffer]
            outputs.append(layout_entry(arg.buffer, arg.layout or buf.layout, buf.dtype))
        else:
            outputs.append({"value": repr(arg)})
    return inputs, outputs


def memory_table(schedule: Schedule) -> dict:
    """The memory plan's arena: its size in bytes, its alignment, and per buffer stored in it
    ``[offset, bytes]`` of its slot (sizes as in ``layout_entry``); the other buffers the
    host code allocates on their own (graph outputs, large buffers, extern results)."""
    arena = schedule.memory.arena
    if arena is None or not arena.slots:
        return {"arena_bytes": 0, "alignment": 1, "slots": {}}
    slots = {name: [_size(arena.slots[root].offset), _size(arena.slots[root].nbytes)]
             for name, root in sorted(arena.root_of.items())}
    return {"arena_bytes": _size(arena.size), "alignment": arena.alignment, "slots": slots}


def tables_source(schedule: Schedule, kernel_name, segment_of=None) -> str:
    """The module lines that define ``INPUTS``, ``OUTPUTS``, ``LAUNCHES`` and ``MEMORY``."""
    inputs, outputs = io_tables(schedule.graph)
    launches = launch_table(schedule, kernel_name, segment_of)
    return (f"\nINPUTS = {inputs!r}\nOUTPUTS = {outputs!r}\nLAUNCHES = {launches!r}\n"
            f"MEMORY = {memory_table(schedule)!r}\n")
