"""Assemble the C++ library and the Python host code of one scheduled ATen graph.

The kernels between two extern calls form a *segment*: one ``extern "C"``
function that runs them in order. The host code (Python, see ``host.py``)
allocates buffers, calls each segment once through ctypes with the buffers'
data pointers, and calls ATen for the extern steps in between, so a graph with
no extern call is a single C++ call.

The module follows the schedule it is given, which the driver refines for CPUs
first (column sums join the row kernel that computes their operands,
``schedule/column_fusion.py``); the host code follows the same schedule, which
the module carries.
"""
from __future__ import annotations

import dataclasses

from ...schedule.groups import KernelGroup
from ...schedule.scheduler import Schedule
from ..common import prepare_kernel
from .index_checks import error_code, segment_call
from .kernel import CppKernel, generate_cpp_kernel
from . import vector16
from .ops import storage_type
from .prelude import PRELUDE  # noqa: F401  (a library is PRELUDE + module sources)

@dataclasses.dataclass
class Segment:
    name: str
    steps: list          # KernelGroup, in order
    buffers: list        # buffer names, in parameter order
    sizes: list = dataclasses.field(default_factory=list)   # size symbols, parameters after the buffers
    checks_indices: bool = False   # returns the code of an index out of range (index_checks.py), else 0


@dataclasses.dataclass
class CppModule:
    source: str                 # the kernels and segments (a library is PRELUDE + sources)
    kernels: dict               # kernel name -> CppKernel
    segments: list              # Segment, in execution order
    segment_of_step: dict       # step index -> Segment (first step of each segment only)
    schedule: Schedule          # the schedule the kernels implement (refined for CPUs)
    kernel_of_step: dict = dataclasses.field(default_factory=dict)   # step index -> kernel name
    index_errors: dict = dataclasses.field(default_factory=dict)   # code a segment returns -> error


# A segment's pointers are one ctypes call's arguments, of which ctypes allows 1024.
MAX_SEGMENT_POINTERS = 1000


def _segments(schedule: Schedule) -> list:
    out, current = [], []
    for step in schedule.steps:
        if isinstance(step, KernelGroup):
            current.append(step)
        elif current:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def _in_place_pairs(step_memory) -> frozenset:
    """The outputs a step writes over inputs it still reads, and those inputs."""
    donors = step_memory.in_place()
    return frozenset(donors) | frozenset(name for name, src in step_memory.allocate if src in donors)


def generate_cpp_module(schedule: Schedule, prefix: str = "") -> CppModule:
    """The graph's C++; ``prefix`` keeps names unique when several graphs share one library.

    ``schedule`` is the one the kernels implement: the driver has refined it for the
    target already (column sums in row kernels, ``schedule/column_fusion.py``)."""
    buffers = schedule.graph.by_name
    kernels: dict[str, CppKernel] = {}
    parts = []
    segments = []
    kernel_of_step = {}
    index_errors = {}

    def close(steps, params, size_params, calls):
        size_params = sorted(size_params)
        checks = any(kernels[kernel_of_step[step.index]].index_errors for step in steps)
        seg = Segment(f"{prefix}segment_{len(segments)}", steps, params, size_params, checks)
        segments.append(seg)
        head = ", ".join([f"void* p{j}" for j in range(len(params))] + [f"int64_t {n}" for n in size_params])
        tail = ["    return 0;"] if checks else []
        parts.append(f'extern "C" {"int64_t" if checks else "void"} {seg.name}({head}) {{\n'
                     + "\n".join(calls + tail) + "\n}\n")

    for run in _segments(schedule):
        steps, params, size_params, calls = [], [], [], []
        for step in run:
            kernel = generate_cpp_kernel(prepare_kernel(step), buffers, f"{prefix}cpp_{step.name}",
                                         _in_place_pairs(schedule.memory.steps[step.index]), schedule.graph.sizes)
            kernels[kernel.name] = kernel
            kernel_of_step[step.index] = kernel.name
            parts.append(kernel.source)
            arguments = (len(set(params) | {b for b, _ in kernel.params})
                         + len(set(size_params) | set(kernel.size_args)))
            if steps and arguments > MAX_SEGMENT_POINTERS:
                close(steps, params, size_params, calls)   # ctypes calls take at most 1024 arguments
                steps, params, size_params, calls = [], [], [], []
            args = []
            for buffer, out in kernel.params:
                if buffer not in params:
                    params.append(buffer)
                t = storage_type(buffers[buffer].dtype)
                args.append(f"static_cast<{'' if out else 'const '}{t}*>(p{params.index(buffer)})")
            size_params.extend(n for n in kernel.size_args if n not in size_params)
            call = f"{kernel.name}({', '.join(args + kernel.size_args)})"
            if kernel.index_errors:
                number = len(kernels) - 1
                calls.append(segment_call(number, call))
                index_errors.update({error_code(number, bit): e for bit, e in kernel.index_errors.items()})
            else:
                calls.append(f"    {call};")
            steps.append(step)
        close(steps, params, size_params, calls)
    if any(kernel.vector16 for kernel in kernels.values()):
        parts.insert(0, vector16.HELPERS)
    first = {seg.steps[0].index: seg for seg in segments}
    return CppModule("\n".join(parts), kernels, segments, first, schedule, kernel_of_step, index_errors)
