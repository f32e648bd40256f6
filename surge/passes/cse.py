"""Common-subexpression elimination: one node per distinct pure computation."""
from __future__ import annotations

import torch
import torch.fx

from .graph_code import code_changed
from .purity import is_pure


def _key(value):
    """A hashable stand-in for a node argument (lists become tuples)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_key(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((k, _key(v)) for k, v in value.items()))
    if isinstance(value, slice):
        return ("slice", _key(value.start), _key(value.stop), _key(value.step))
    if isinstance(value, float):
        # 0.0 == -0.0 and NaN != NaN: compare floats by their text.
        return ("float", repr(value))
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value).__name__, value)


def eliminate_common_subexpressions(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    seen: dict = {}
    for node in list(gm.graph.nodes):
        if not is_pure(node):
            continue
        key = (node.target, _key(node.args), _key(node.kwargs))
        first = seen.get(key)
        if first is None:
            seen[key] = node
        else:
            node.replace_all_uses_with(first)
            gm.graph.erase_node(node)
    code_changed(gm)
    return gm
