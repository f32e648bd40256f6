"""ATen ops whose output size depends on data, traced with a data-dependent size.

A torch-level graph from the frontend may hold ```nonzero``, ``masked_select`` or
``x[mask]`` (``aten.index.Tensor`` with a boolean mask) under
``capture_dynamic_output_shape_ops``, and reads of a value used as a size
(``torch.zeros(n.item())``) under ``capture_scalar_outputs``; its meta values carry a data-dependent size
of the frontend's shape environment (``frontend/variables/data_dependent_ops.py``).
The aot trace gives each such ATen op a fresh data-dependent size of that
environment, and a ``sym_size`` node that later nodes (a ``view`` to it, a
``new_zeros`` of it) compute from. The ATen graph then runs as eager does: every
size comes from the tensors of the call.
"""
from __future__ import annotations

import torch

from ..frontend.size_node import env_of
from ..frontend.symbolic import Symbol
from ..frontend.variables.data_dependent_ops import dynamic_output_rule

aten = torch.ops.aten

_OPS = {"nonzero": torch.nonzero, "masked_select": torch.masked_select}


def graph_has_data_dependent_sizes(gm: torch.fx.GraphModule):
    """The frontend's shape environment when the graph holds data-dependent sizes or values
    read back from tensors, else None."""
    for node in gm.graph.nodes:
        env = env_of(node.meta.get("val"))
        if env is not None and any(info.data_dependent for info in env.symbols.values()):
            return env
    return None


def data_dependent_rule(func, meta_args: tuple, meta_kwargs: dict):
    """The frontend's rule for an ATen op with a data-dependent output size, else None."""
    name = func._overloadpacket.__name__
    if name in _OPS and func._overloadname in ("default", ""):
        return dynamic_output_rule("call_function", _OPS[name], meta_args, meta_kwargs)
    if func is aten.index.Tensor and len(meta_args) == 2:
        indices = list(meta_args[1])
        if len(indices) == 1 and isinstance(indices[0], torch.Tensor):
            import operator
            return dynamic_output_rule("call_function", operator.getitem, (meta_args[0], indices[0]), {})
    return None


def trace_scalar_read(tracer, env, node_arg, meta_arg, device, why: str):
    """``aten._local_scalar_dense``: a fresh data-dependent symbol, the node that reads it."""
    node = tracer.graph.call_function(aten._local_scalar_dense.default, (node_arg,))
    pytype = float if meta_arg.dtype.is_floating_point else int
    value = env.unbacked_symbol(node, pytype, why)
    node.meta["val"] = value
    tracer.symbols.env = env
    tracer.symbols.by_symbol[value.node.expr.single_atom()] = node
    return value


def trace_data_dependent(tracer, env, func, rule, node_args, node_kwargs, device, why: str):
    """Record ``func`` with a meta result whose data-dependent sizes are fresh symbols, each
    computed in the graph by ``aten.sym_size.int`` of the result."""
    meta_out = rule.build(env, why)
    node = tracer.graph.call_function(func, tuple(node_args), node_kwargs)
    tracer._set_meta(node, meta_out, device)
    size = meta_out.shape[0]
    atom = size.node.expr.single_atom()
    if isinstance(atom, Symbol):
        sym = tracer.graph.call_function(aten.sym_size.int, (node, 0))
        sym.meta["val"] = size
        tracer.symbols.env = env
        tracer.symbols.by_symbol[atom] = sym
    return tracer._wrap_outputs(node, meta_out, device)
