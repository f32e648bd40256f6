"""Scatters that write into the tensor they update, with no copy of it.

Lowering makes each scatter (``x[idx] = v``, ``index_copy``, a slice assignment) a copy
of the tensor it updates, for that scatter alone, and a loop that stores the new
elements into the copy's storage (``ir.ScatterBuffer``). The copy is what eager's
functional form costs (``index_put`` clones its input): where the tensor itself may be
overwritten, this step drops the copy and the scatter stores into the tensor's storage,
so a KV cache updated with ``index_copy_`` moves one row per step, not the whole cache
twice (once into the copy, once back).

The copy of ``t`` goes when:

- it copies ``t`` whole (same elements at the same places, same dtype);
- ``t``'s old value is needed by no step after the scatter's kernel (steps run in
  order: every other reader runs before it) nor after the call (``t`` is no graph
  output; a training forward's saved input is one);
- ``t`` is a graph input that the graph updates (``copy_(t, new)`` at its end: the caller
  gets the new value in ``t``'s storage anyway) and the scatter is no graph output (the
  copy back may write another value there), or a buffer with a storage of its own (a
  kernel's or extern call's result, no view and no view's base) that is no copy back's
  source (whose storage the memory plan may give to an input); a buffer in an input's
  storage (an earlier scatter's) counts as that input;
- no other scatter took ``t``'s storage (two updates of one tensor, each from its old
  value, need two storages).

A copy back ``copy_(t, v)`` whose ``v`` now lives in ``t``'s storage (the scatter, or a
chain of scatters, each into the last one's result) has nothing to copy and goes too.
"""
from __future__ import annotations

from ..lowering.ir import ComputedBuffer, LoopGraph, ScatterBuffer
from ..lowering.values import Load
from .fusion import consumers, read_buffers
from .groups import KernelGroup
from .input_stores import copy_back
from .memory import _is_tuple, _may_alias


def _copied(copy: ComputedBuffer, by_name: dict) -> str | None:
    """The buffer that ``copy`` copies whole, element for element, or None."""
    value = copy.value
    if isinstance(copy, ScatterBuffer) or copy.is_reduction or not isinstance(value, Load) or value.indirect:
        return None
    source = by_name[value.buffer]
    if (source.dtype, source.device) != (copy.dtype, copy.device) or value.index != copy.store_index():
        return None
    same = tuple(source.layout.shape) == tuple(copy.layout.shape) and \
        tuple(source.layout.stride) == tuple(copy.layout.stride) and source.layout.offset == copy.layout.offset
    return value.buffer if same else None


def scatters_in_place(graph: LoopGraph, steps: list) -> tuple[list, dict]:
    """``steps`` without the copies that scatters no longer need (and the copy backs that
    became no-ops), and scatter name -> the buffer whose storage it writes into: its
    ``into``, or the tensor that ``into`` copied."""
    by_name = graph.by_name
    inputs = {b.name for b in graph.inputs}
    users = consumers(graph, steps)
    copy_backs = {}   # input -> (copy step index, new value)
    for step in steps:
        found = copy_back(step)
        if found is not None:
            copy_backs[found[0]] = (step.index, found[1])
    sources = {value for _, value in copy_backs.values()}
    copies = {steps[k].buffer.name for k, _ in copy_backs.values()}
    bases = {name for buf in graph.buffers if _may_alias(buf) and buf.name not in copies for name in read_buffers(buf)}
    storage: dict[str, str] = {}
    taken: set = set()
    for step in steps:
        if not isinstance(step, KernelGroup):
            continue
        for node in list(step.nodes):
            if not isinstance(node, ScatterBuffer):
                continue
            copy = by_name[node.into]
            source = _copied(copy, by_name)
            storage[node.name] = node.into
            if source is None or source in taken or source in bases:
                continue
            readers = users.get(source, set()) - {copy_backs.get(source, (None,))[0]}
            if -1 in readers or any(k >= step.index for k in readers):
                continue   # the old value is read after the scatter (or by the caller)
            if source in inputs or _storage_root(source, storage) in inputs:
                if _storage_root(source, storage) not in copy_backs or -1 in users.get(node.name, ()):
                    continue   # an input the graph does not update keeps its value; a result
                    # returned in an input's storage would be what the copy back writes there
            elif _may_alias(by_name[source]) or _is_tuple(by_name[source]) or source in sources:
                continue
            storage[node.name] = source
            taken.add(source)
            for group in steps:
                if isinstance(group, KernelGroup) and copy in group.nodes:
                    group.nodes.remove(copy)
    dropped = {k for dst, (k, value) in copy_backs.items() if _storage_root(value, storage) == dst}
    return [s for s in steps if s.index not in dropped], storage


def _storage_root(name: str, storage: dict) -> str:
    """The buffer whose storage ``name`` ends up in, following scatters into scatters."""
    while name in storage and storage[name] != name:
        name = storage[name]
    return name
