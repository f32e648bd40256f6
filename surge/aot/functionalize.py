"""Functionalization while tracing: views and in-place ops become functional ops.

Every traced tensor belongs to one ``Storage`` (an aliasing group, what eager would
call a storage). A storage holds the graph node of its *base* value; a tensor that
is a view holds the chain of view ops that leads from the base to it.

- A view op records its node and extends the chain (``apply_view``).
- An in-place op (or an ``out=`` op) computes its functional counterpart, then
  ``commit_mutation`` writes the new value back into the base by walking the chain
  backwards with each view's inverse scatter (``slice`` -> ``slice_scatter``,
  ``permute`` -> inverse ``permute``, ...). The storage version moves on.
- Every alias of that storage whose version is older regenerates its value by
  replaying its chain on the new base the next time it is used (``current_node``).

At the end of tracing, storages that belong to graph inputs and have moved on are
copied back into the inputs once (see tracer.py); views of inputs that the graph
returns are replayed on the real inputs by the runtime, so they alias as in eager.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
import torch.fx

from ..errors import Unsupported
from .decompositions import packet_name

aten = torch.ops.aten


@dataclasses.dataclass
class Storage:
    """One aliasing group: the current value of its base and who owns it."""

    base_node: torch.fx.Node
    base_meta: torch.Tensor
    device: torch.device
    # Index of the graph input (or lifted parameter/buffer) this storage belongs
    # to; None for tensors made inside the graph.
    input_index: int | None = None
    # A real tensor captured by the graph (not an input): it may be read, not written.
    constant: bool = False
    version: int = 0
    # The traced tensor that is the base itself (a view-free alias), if any.
    owner: Any = None


@dataclasses.dataclass(frozen=True)
class ViewStep:
    """One view op of a chain, replayable on traced and on real tensors alike."""

    op: Any
    args: tuple
    kwargs: dict
    index: int | None = None  # which output of a multi-output view (split, unbind)
    symbolic: bool = False    # args hold sizes computed per call (aot/symbolic_inputs.py)

    def apply(self, tensor):
        out = self.op(tensor, *self.args, **self.kwargs)
        return out[self.index] if self.index is not None else out

    def __str__(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        return f"{self.op}{self.args}{idx}"


@dataclasses.dataclass
class AliasState:
    """Where one traced tensor lives: its storage, view chain and current node."""

    storage: Storage
    chain: tuple[ViewStep, ...]
    node: torch.fx.Node
    version: int


# Views whose value is the input's value: no node is recorded for them.
IDENTITY_VIEWS = frozenset({"alias", "detach", "lift_fresh"})

# Ops that change a tensor's sizes/strides in place. On a tensor made inside the
# graph the tracer turns the tensor into the equivalent view; on a graph input
# (whose caller would see new sizes), and for resize_/set_, they are refused.
METADATA_MUTATIONS = frozenset({
    "resize_", "resize_as_", "set_", "t_", "transpose_", "squeeze_", "unsqueeze_",
    "as_strided_", "swapdims_", "swapaxes_", "detach_",
})

# In-place ops whose functional counterpart has a different name or overload.
_FUNCTIONAL_OVERRIDES: dict[str, Callable] = {
    "aten::normal_": lambda: aten.normal_functional.default,
    "aten::bernoulli_.float": lambda: aten.bernoulli.p,
    "aten::bernoulli_.Tensor": lambda: aten.bernoulli.Tensor,
}


def is_view_op(op) -> bool:
    returns = op._schema.returns
    return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write


def mutated_arguments(op) -> list[str]:
    return [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def functional_variant(op):
    """The out-of-place overload computing what an in-place or out= op writes."""
    schema = op._schema
    key = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
    for name in (key, schema.name):
        if name in _FUNCTIONAL_OVERRIDES:
            return _FUNCTIONAL_OVERRIDES[name]()
    name = packet_name(op)
    if name.endswith("_"):
        return _twin_overload(op, name[:-1])
    # out= form: the overload of the same packet with the non-out arguments.
    written = set(mutated_arguments(op))
    wanted = [a.name for a in schema.arguments if a.name not in written]
    packet = getattr(getattr(torch.ops, op.namespace), name)
    for overload_name in packet.overloads():
        candidate = getattr(packet, overload_name)
        if mutated_arguments(candidate):
            continue
        if [a.name for a in candidate._schema.arguments] == wanted:
            return candidate
    return None


# ---------------------------------------------------------------- inverse views
# packet name -> scatter(parent_value, new_child_value, step) -> new parent value.
_SCATTERS: dict[str, Callable] = {}


def register_scatter(*names: str):
    def wrap(fn):
        for name in names:
            _SCATTERS[name] = fn
        return fn
    return wrap


@register_scatter("slice")
def _scatter_slice(parent, child, step):
    return aten.slice_scatter(parent, child, *step.args, **step.kwargs)


@register_scatter("select")
def _scatter_select(parent, child, step):
    return aten.select_scatter(parent, child, *step.args, **step.kwargs)


@register_scatter("diagonal")
def _scatter_diagonal(parent, child, step):
    return aten.diagonal_scatter(parent, child, *step.args, **step.kwargs)


@register_scatter("as_strided")
def _scatter_as_strided(parent, child, step):
    return aten.as_strided_scatter(parent, child, *step.args, **step.kwargs)


@register_scatter("view", "_unsafe_view", "squeeze", "unsqueeze", "reshape", "_reshape_alias",
                  "view_as", "flatten", "unflatten")
def _scatter_reshape(parent, child, step):
    # A reshape is undone by reshaping back; the child's value is a fresh
    # functional tensor, so copying it contiguous first is always allowed.
    child = aten.clone(child, memory_format=torch.contiguous_format)
    return aten.view(child, list(parent.shape))


@register_scatter("permute")
def _scatter_permute(parent, child, step):
    dims = [d % parent.dim() for d in step.args[0]]
    inverse = [dims.index(i) for i in range(len(dims))]
    return aten.permute(child, inverse)


@register_scatter("transpose", "t", "swapdims", "swapaxes")
def _scatter_transpose(parent, child, step):
    return step.op(child, *step.args, **step.kwargs)


@register_scatter("view_as_real")
def _scatter_view_as_real(parent, child, step):
    return aten.view_as_complex(aten.clone(child, memory_format=torch.contiguous_format))


@register_scatter("view_as_complex")
def _scatter_view_as_complex(parent, child, step):
    return aten.view_as_real(child)


@register_scatter("alias", "detach", "lift_fresh")
def _scatter_identity(parent, child, step):
    return child


@register_scatter("unbind")
def _scatter_unbind(parent, child, step):
    dim = step.args[0] if step.args else step.kwargs.get("dim", 0)
    return aten.select_scatter(parent, child, dim, step.index)


@register_scatter("split", "split_with_sizes")
def _scatter_split(parent, child, step):
    dim = step.args[1] if len(step.args) > 1 else step.kwargs.get("dim", 0)
    size = parent.shape[dim]
    sizes = step.args[0]
    if isinstance(sizes, int):
        sizes = [min(sizes, size - i) for i in range(0, size, sizes)] or [0]
    start = sum(sizes[: step.index])
    return aten.slice_scatter(parent, child, dim, start, start + sizes[step.index])


def commit_mutation(tracer, target, value) -> None:
    """Make ``value`` (same shape and dtype) the new contents of traced ``target``."""
    state: AliasState = target._alias
    storage = state.storage
    if value.dtype != target.dtype:
        value = aten._to_copy(value, dtype=target.dtype)
    if tuple(value.shape) != tuple(target.shape):
        value = aten.expand(value, list(target.shape))
    node_meta = tracer.node_meta(value)
    if target.is_contiguous() and not node_meta.is_contiguous():
        # Later views of target assume target's strides; keep the value dense.
        value = aten.clone(value, memory_format=torch.contiguous_format)
    base = tracer.fresh_tensor(storage.base_node, storage.base_meta, storage.device)
    new_base = _scatter_into_base(tracer, base, state.chain, value, target)
    storage.base_node = tracer.current_node(new_base)
    storage.base_meta = tracer.node_meta(new_base)
    storage.version += 1
    state.node = tracer.current_node(value)
    state.version = storage.version


def _scatter_into_base(tracer, base, chain, value, target):
    parents = [base]
    for step in chain[:-1]:
        parents.append(step.apply(parents[-1]))
    new = value
    for i in reversed(range(len(chain))):
        scatter = _SCATTERS.get(packet_name(chain[i].op))
        if scatter is None:
            return _scatter_from_root(base, value, target)
        new = scatter(parents[i], new, chain[i])
    return new


def _scatter_from_root(base, value, target):
    # Unknown view op: write through the target's strides into a dense base.
    if not base.is_contiguous() or base.dtype != target.dtype:
        raise Unsupported(
            f"in-place write through a view made by an op surge cannot invert "
            f"into a non-contiguous base (view of shape {tuple(target.shape)})"
        )
    offset = target.storage_offset() - base.storage_offset()
    return aten.as_strided_scatter(base, value, list(target.shape), list(target.stride()), offset)


def metadata_mutation_view(op):
    """The view op whose result ``op`` (``squeeze_``, ``t_``...) turns its input into."""
    name = packet_name(op)
    if name in ("resize_", "resize_as_", "set_", "detach_"):
        return None
    return _twin_overload(op, name[:-1])


def _twin_overload(op, packet_name_: str):
    """The overload of ``aten.<packet_name_>`` taking the same arguments as ``op``."""
    packet = getattr(aten, packet_name_, None)
    if packet is None:
        return None
    same = getattr(packet, op._overloadname, None)
    if same is not None:
        return same
    names = [a.name for a in op._schema.arguments]
    for overload_name in packet.overloads():
        candidate = getattr(packet, overload_name)
        if [a.name for a in candidate._schema.arguments] == names:
            return candidate
    return None
