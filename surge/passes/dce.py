"""Dead-code elimination: drop nodes whose results nobody uses."""
from __future__ import annotations

import torch.fx

from .graph_code import code_changed
from .purity import is_pure, is_random


def eliminate_dead_code(gm: torch.fx.GraphModule, *, keep_random: bool = False) -> torch.fx.GraphModule:
    """Remove unused pure nodes (and unused random ops unless ``keep_random``).

    ``keep_random`` keeps unused random ops so that the RNG stream advances as in
    eager, which ``fallback_random``'s bit-identical results rely on.
    """
    graph = gm.graph
    for node in reversed(list(graph.nodes)):
        if node.users or node.op in ("placeholder", "output"):
            continue
        removable = is_pure(node) or node.op == "get_attr" or (is_random(node) and not keep_random)
        if removable:
            graph.erase_node(node)
    _drop_unused_attributes(gm)
    code_changed(gm)
    return gm


def _drop_unused_attributes(gm: torch.fx.GraphModule) -> None:
    used = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    for name in [k for k in vars(gm) if k.startswith("_tensor_constant") or k.startswith("_folded")]:
        if name not in used:
            delattr(gm, name)
