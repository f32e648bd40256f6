"""Values read back from tensors, kept in the graph (``capture_scalar_outputs``).

``t.item()``, ``int(t)``, ``float(t)`` and ``t.tolist()`` move tensor data into
Python. By default each is a graph break (``tensor.py``): CPython runs the read,
and the value reaches the resume function as an argument, symbolic once it
changed (never a constant guarded by value). With the option on, the read is a
node of the graph (``item``), its value a *data-dependent* symbol of the shape
environment (``u0``, ``uf1``: no example value, nothing the entry checks), and
arithmetic on it (Python's or a tensor op's) stays in the graph: one graph for
every value. A decision on it the graph cannot hold (``if v > 0:``, ``range(n)``,
returning it) raises ``DataDependent``; the capture then starts again with the
frame's reads breaking the graph, and explain says why.
"""
from __future__ import annotations

import operator

import torch

from .base import unsupported
from .constant import ConstantVariable

# Methods that read one value: (python type of the result, dtype converted to first).
_READS = {"item": None, "__int__": torch.int64, "__float__": torch.float64, "__index__": None}
# At most this many elements are read by one ``tolist()`` in the graph.
_TOLIST_LIMIT = 64


def captures_reads(tx) -> bool:
    return tx.options.capture_scalar_outputs and tx.dynamic.state.data_dependent_break is None


def why_reads_break(tx) -> str:
    """The tail of a read's graph-break reason: how to keep it, or why it could not be kept."""
    if not tx.options.capture_scalar_outputs:
        return " (options={'capture_scalar_outputs': True} keeps the value in the graph where it only meets arithmetic)"
    return f" (capture_scalar_outputs could not keep it: {tx.dynamic.state.data_dependent_break})"


def read_scalar_method(tx, tensor, name: str):
    """The rule of ``tensor.<name>()`` for the reads above and ``tolist``; None if not one."""
    if name == "tolist":
        return _tolist(tx, tensor)
    if name not in _READS:
        return None
    return read_scalar(tx, tensor, _READS[name], index=name == "__index__")


def read_scalar(tx, tensor, convert_to=None, index=False):
    from .tensor import record_op

    example = tensor.example
    if any(not isinstance(s, int) for s in example.shape) or example.numel() != 1:
        return None   # eager raises for more than one element; CPython shows it at the break
    dtype = convert_to or example.dtype
    if dtype is torch.bool or dtype.is_complex or (index and dtype.is_floating_point):
        return None   # a truth value decides control flow; complex and index reads break
    if convert_to is not None and convert_to is not example.dtype:
        tensor = record_op(tx, "call_method", "to", [tensor, ConstantVariable(convert_to)], {})
    pytype = float if dtype.is_floating_point else int
    frame = tx.current_frame
    where = f"{frame.code.co_filename}:{frame.lineno()}"
    node = tx.graph.create_node("call_method", "item", (tensor.node,), {}, tx.stack_trace())
    node.meta["read_at"] = where
    value = tx.dynamic.env.unbacked_symbol(node, pytype, f"read back from a tensor at {where}")
    node.meta["val"] = value
    return ConstantVariable(value)


def _tolist(tx, tensor):
    from .containers import ListVariable
    from .tensor import record_op

    example = tensor.example
    if any(not isinstance(s, int) for s in example.shape) or example.numel() > _TOLIST_LIMIT:
        return None
    if example.dim() == 0:
        return read_scalar(tx, tensor)

    def rows(t, shape):
        items = []
        for i in range(shape[0]):
            row = record_op(tx, "call_function", operator.getitem, [t, ConstantVariable(i)], {})
            item = rows(row, shape[1:]) if len(shape) > 1 else read_scalar(tx, row)
            if item is None:
                return None
            items.append(item)
        return ListVariable(items)
    return rows(tensor, tuple(example.shape))


def unsupported_read(tx, name: str):
    unsupported(f"Tensor.{name}() reads tensor data into Python" + why_reads_break(tx))
