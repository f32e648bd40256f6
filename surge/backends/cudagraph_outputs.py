"""What a replay hands out, and how an output that a later replay overwrote is caught.

A recorded graph writes its outputs into the same memory at every replay. Handing that
memory to the user as it is would let an old result change under the user's feet, so a
replay hands out *aliases*: tensors with a storage of their own over the graph's output
memory, a storage that does not own it (``torch._C._construct_storage_from_data_pointer``).
When a later replay is about to overwrite that memory, the aliases handed out before are
invalidated: the recorder makes every read of their storage raise ``STALE`` (on CUDA,
``torch._C._set_storage_access_error_msg``), so a stale read fails with a message saying
what to do instead of returning the next call's numbers. Views a user made of an alias
share its storage and fail the same way; ``alias.clone()`` is the user's own memory.

Cost: one storage and one tensor per output per replay (a few microseconds each), and
one check per output when the memory is next overwritten; no tensor subclass, so the
user's code runs at full speed on the outputs. Outputs a training forward saves for its
backward are not aliased (many, and never seen by the user): they are handed out as the
graph's own tensors, and a replay first checks that no backward still holds the previous
ones (``held_elsewhere``); if one does, that call runs without the graph.

The wrapper holds each alias until it is invalidated. That also keeps autograd from
adopting a gradient output as a parameter's ``.grad`` (it copies one that others hold),
so ``.grad`` never lives in memory a replay writes.
"""
from __future__ import annotations

import sys

import torch

STALE = ("surge: this tensor is an output of {name} run as a CUDA graph (mode='reduce-overhead'), and a "
         "later replay has overwritten it. To keep an output across calls, clone it (out.clone()) before "
         "calling the compiled function again or before surge.cudagraph_mark_step_begin().")
FREED = ("surge: this tensor is an output of {name} run as a CUDA graph (mode='reduce-overhead'), whose "
         "recording has been freed. To keep an output, clone it (out.clone()) while it is valid.")


def make_alias(static: torch.Tensor, storages: dict) -> torch.Tensor:
    """A tensor over ``static``'s memory with a storage of its own (one per storage of
    ``static``, shared by the outputs of one replay that share memory)."""
    whole = static.untyped_storage()
    ptr = whole.data_ptr()
    storage = storages.get(ptr)
    if storage is None:
        storage = storages[ptr] = torch._C._construct_storage_from_data_pointer(ptr, static.device, whole.nbytes())
    return static.new_empty(0).set_(storage, static.storage_offset(), static.shape, static.stride())


def references(t: torch.Tensor) -> tuple:
    """(Python references, C++ references) to ``t``: both change when autograd saves it
    (a torch without ``Tensor._use_count`` counts the Python ones only)."""
    use_count = getattr(t, "_use_count", None)
    return sys.getrefcount(t), use_count() if use_count is not None else 0


def reference_counts(tensors: list) -> list:
    """The baseline ``held_elsewhere`` compares with, taken by the same code (the same
    temporaries hold the tensors while they are counted)."""
    return [references(t) for t in tensors]


def held_elsewhere(tensors: list, baseline: list) -> bool:
    """Whether any of ``tensors`` is referenced by more than it was at ``baseline``. Fewer
    is not held: a temporary of the recording call may have held one when it was counted."""
    return any(py > base_py or cpp > base_cpp
               for (py, cpp), (base_py, base_cpp) in zip(reference_counts(tensors), baseline))
