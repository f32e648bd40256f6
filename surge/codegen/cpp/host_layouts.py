"""Which layout each buffer's Python tensor has in the host code, so views are rarely needed.

The kernels see only data pointers: a buffer that kernels write can be allocated
in any shape and strides over the same storage. The host code passes buffers to
extern ops and returns them through views (``as_strided``, ~0.9 us each on a CPU);
allocating a buffer directly in the layout its extern readers and the graph's
outputs ask for most often makes those views plain names. Buffers that reuse a
dead buffer's storage are the same Python tensor as that buffer, so the choice is
made once per allocation, over the readers of every name that shares it.

``host_layouts(schedule)`` maps every buffer the host code names to the layout of
the tensor bound to that name, in ``as_strided`` coordinates: a graph input's
offset counts from its own first element, every other offset from its storage's start.
"""
from __future__ import annotations

import collections

import sympy

from ...lowering.ir import ExternBuffer, Layout, TensorArg
from ...schedule.scheduler import Schedule


def layout_key(layout: Layout) -> tuple:
    """Shape, strides and offset as expressions (numbers for static sizes), to compare and hash."""
    return (tuple(sympy.expand(s) for s in layout.shape), tuple(sympy.expand(s) for s in layout.stride),
            sympy.expand(layout.offset))


def extent(layout: Layout):
    """Elements of storage a tensor of this layout spans from its storage's start."""
    if any(s == 0 for s in layout.shape):
        return sympy.Integer(0)
    return sympy.expand(layout.offset + 1 + sum(((n - 1) * s for n, s in zip(layout.shape, layout.stride)),
                                                sympy.Integer(0)))


def tensor_args(value):
    """The ``TensorArg``s in an extern call's argument, however nested in lists and tuples."""
    if isinstance(value, TensorArg):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensor_args(v)


def allocation_roots(schedule: Schedule) -> dict:
    """Buffer name -> the name whose allocation (or extern result) its tensor is."""
    roots = {}
    for step in schedule.memory.steps:
        for name, src in step.allocate:
            roots[name] = roots.get(src, src) if src is not None else name
    return roots


def host_layouts(schedule: Schedule) -> dict:
    graph = schedule.graph
    by_name = graph.by_name
    layouts = {b.name: Layout(b.layout.shape, b.layout.stride) for b in graph.inputs}
    layouts.update((b.name, b.layout) for b in graph.buffers if b.layout is not None)
    roots = allocation_roots(schedule)
    fresh = {name for name, root in roots.items() if name == root}

    wanted = collections.defaultdict(collections.Counter)   # allocation -> layout key -> readers
    examples = {}

    def want(arg: TensorArg):
        root = roots.get(arg.buffer)
        if root in fresh:
            layout = arg.layout or by_name[arg.buffer].layout
            wanted[root][layout_key(layout)] += 1
            examples[layout_key(layout)] = layout

    for buf in graph.buffers:
        if isinstance(buf, ExternBuffer) and buf.parent is None:
            for arg in tensor_args(list(buf.args) + list(buf.kwargs.values())):
                want(arg)
    for out in graph.outputs:
        for arg in tensor_args(out.arg):
            want(arg)
    for root, counts in wanted.items():
        key = counts.most_common(1)[0][0]
        layout = examples[key]
        own = by_name[root].layout
        # the same storage, from its start: kernels index it as they always do
        if layout.offset == 0 and extent(layout) == extent(own):
            layouts[root] = layout
    for name, root in roots.items():
        layouts[name] = layouts[root]
    return layouts


def is_transpose(layout: Layout, of: Layout) -> bool:
    """``layout`` is ``of.t()``: a 2-D layout with its dims swapped, at the same offset."""
    return (len(of.shape) == 2 and layout_key(layout) ==
            (tuple(sympy.expand(s) for s in reversed(of.shape)), tuple(sympy.expand(s) for s in reversed(of.stride)),
             sympy.expand(of.offset)))
