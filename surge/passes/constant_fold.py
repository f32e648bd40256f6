"""Constant folding: evaluate nodes whose inputs are all graph constants."""
from __future__ import annotations

import torch
import torch.fx

from .graph_code import code_changed
from .purity import is_pure

# Folding trades a computation for a stored tensor; beyond this many elements the
# stored tensor costs more (memory, cache) than computing it at run time.
MAX_FOLDED_NUMEL = 4096


def fold_constants(gm: torch.fx.GraphModule, *, max_numel: int = MAX_FOLDED_NUMEL) -> torch.fx.GraphModule:
    """Replace pure nodes computed only from get_attr constants by a new constant.

    Factories without tensor inputs (``full``, ``iota``) are left alone: they are
    cheaper as index expressions than as stored tensors.
    """
    values: dict[torch.fx.Node, object] = {}
    for node in list(gm.graph.nodes):
        if node.op == "get_attr":
            # Only true constants: live state (parameters, buffers) changes between calls.
            if node.meta.get("constant"):
                values[node] = getattr(gm, node.target)
            continue
        inputs = node.all_input_nodes
        if not is_pure(node) or not inputs or any(i not in values for i in inputs):
            continue
        result = node.target(*_materialize(node.args, values), **_materialize(node.kwargs, values))
        if isinstance(result, torch.Tensor):
            if result.numel() > max_numel:
                continue
            name = _fresh_name(gm)
            gm.register_buffer(name, result)
            with gm.graph.inserting_before(node):
                const = gm.graph.get_attr(name)
            const.meta = dict(node.meta, constant=True)
            node.replace_all_uses_with(const)
            gm.graph.erase_node(node)
            values[const] = result
        elif isinstance(result, (tuple, list)):
            values[node] = result  # its getitems fold next
    code_changed(gm)
    return gm


def _materialize(arg, values):
    return torch.fx.node.map_arg(arg, lambda n: values[n])


def _fresh_name(gm) -> str:
    i = 0
    while hasattr(gm, f"_folded{i}"):
        i += 1
    return f"_folded{i}"
