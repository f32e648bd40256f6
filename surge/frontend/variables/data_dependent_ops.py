"""Ops whose output size depends on data: ``nonzero``, ``masked_select``, ``x[mask]``.

No meta kernel can say how many elements a mask selects. With
``capture_dynamic_output_shape_ops`` the op stays in the graph and its result gets a
*data-dependent size* (``u0``, in ``[0, numel]``): a symbol of the shape environment
that no entry reads, computed by the graph (``t.size(0)``) wherever a later op needs
it. Meta kernels run on that size under the size-oblivious rule (shape_env.py);
a decision the user's code makes on it (``if len(idx) == 0``, ``range(n)``) cannot be
held by the graph, and the capture starts again with such ops breaking the graph.
Off (the default), each one breaks the graph.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch

from .base import unsupported


@dataclass
class DataDependentOp:
    name: str
    build: object   # (env, why) -> meta result, its data-dependent sizes fresh symbols


def dynamic_output_rule(kind: str, target, margs: tuple, mkwargs: dict):
    """The rule of an op whose output size depends on data, else None."""
    method = target if kind == "call_method" else None
    if method in ("nonzero", "argwhere") or target in (torch.nonzero, torch.argwhere):
        return _nonzero(margs[0], bool(mkwargs.get("as_tuple", False)), method or target.__name__)
    if method == "masked_select" or target is torch.masked_select:
        return _masked_select(margs[0], margs[1] if len(margs) > 1 else mkwargs.get("mask"))
    if target is operator.getitem and len(margs) == 2:
        return _mask_index(margs[0], margs[1])
    return None


def _numel_bound(shape):
    return math.prod(shape) if all(isinstance(s, int) for s in shape) else math.inf


def _nonzero(x, as_tuple: bool, name: str):
    if not isinstance(x, torch.Tensor):
        return None

    def build(env, why):
        n = env.unbacked_size(why, _numel_bound(x.shape))
        if as_tuple:
            return tuple(torch.empty((n,), dtype=torch.int64, device="meta") for _ in range(max(x.dim(), 1)))
        return torch.empty((n, x.dim()), dtype=torch.int64, device="meta")
    return DataDependentOp(name, build)


def _masked_select(x, mask):
    if not (isinstance(x, torch.Tensor) and isinstance(mask, torch.Tensor)):
        return None

    def build(env, why):
        shape = torch.broadcast_shapes(x.shape, mask.shape)
        return torch.empty((env.unbacked_size(why, _numel_bound(shape)),), dtype=x.dtype, device="meta")
    return DataDependentOp("masked_select", build)


def _mask_index(x, index):
    """``x[mask]`` with one boolean mask over the leading dims of ``x``."""
    if not (isinstance(x, torch.Tensor) and isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)):
        return None
    k = index.dim()
    if k == 0 or k > x.dim() or tuple(index.shape) != tuple(x.shape[:k]):
        return None   # eager's own error, or a broadcast we do not model: the op breaks

    def build(env, why):
        n = env.unbacked_size(why, _numel_bound(index.shape))
        return torch.empty((n, *x.shape[k:]), dtype=x.dtype, device="meta")
    return DataDependentOp("boolean-mask indexing", build)


def captures_dynamic_output_shapes(tx) -> bool:
    return tx.options.capture_dynamic_output_shape_ops and tx.dynamic.state.data_dependent_break is None


def data_dependent_result(tx, rule: DataDependentOp, run_symbolic):
    """The meta result of ``rule``'s op, or a graph break that says how to keep it."""
    if not captures_dynamic_output_shapes(tx):
        if not tx.options.capture_dynamic_output_shape_ops:
            hint = "options={'capture_dynamic_output_shape_ops': True} keeps it in the graph"
        else:
            hint = f"capture_dynamic_output_shape_ops could not keep it: {tx.dynamic.state.data_dependent_break}"
        unsupported(f"{rule.name} has an output size that depends on the data ({hint})")
    frame = tx.current_frame
    why = f"{rule.name} at {frame.code.co_filename}:{frame.lineno()}"
    return run_symbolic(lambda: rule.build(tx.dynamic.env, why))


def bind_sizes(tx, wrapped) -> None:
    """Tell each fresh data-dependent size which graph tensor it is a size of."""
    from .containers import ListVariable, TupleVariable
    from .tensor import TensorVariable

    items = wrapped.items if isinstance(wrapped, (TupleVariable, ListVariable)) else [wrapped]
    env = tx.dynamic.env
    for item in items:
        if not isinstance(item, TensorVariable):
            continue
        for d, size in enumerate(item.example.shape):
            atom = size.node.expr.single_atom() if isinstance(size, torch.SymInt) else None
            info = env.symbols.get(atom) if atom is not None else None
            if info is not None and info.data_dependent and info.size_of is None and info.node is None:
                info.size_of = (item.node, d)
