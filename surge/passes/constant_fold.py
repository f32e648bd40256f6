"""Constant folding: evaluate nodes whose inputs are all graph constants.

A node is constant when it is pure and every input is constant: a stored constant
(``get_attr`` marked ``constant``), or a factory without tensor inputs (``full``,
``iota``: zeros an attention mask is built in). Constants are evaluated ahead of time
and stored where the graph's other nodes read them (the frontier), within
``max_numel`` elements: a frontier value over the limit is computed at run time from
its own constant inputs, stored in their place where they fit (a window-attention mask
of [64, 49, 49] from the [64, 49] window labels it is the pairwise difference of).

Factories stay as they are where nothing but cheap pointwise and view ops would be
folded into them: they are cheaper as index expressions than as stored tensors. What
does fold through them are scatters, indexing and the like (slice assignments of a
mask), which would otherwise be kernels of their own on every call.
"""
from __future__ import annotations

import torch
import torch.fx

from .graph_code import code_changed
from .purity import is_pure

# Folding trades a computation for a stored tensor; beyond this many elements the
# stored tensor costs more (memory, cache) than computing it at run time.
MAX_FOLDED_NUMEL = 4096
# No value of more elements counts as a constant (the inputs of a stored one are evaluated).
MAX_EVALUATED_NUMEL = 1 << 20


def fold_constants(gm: torch.fx.GraphModule, *, max_numel: int = MAX_FOLDED_NUMEL) -> torch.fx.GraphModule:
    """Replace the graph's constant values where other nodes read them by stored tensors."""
    constant: set = set()      # nodes whose value is known ahead of time
    from_state: set = set()    # ... computed from a stored constant
    involved: set = set()      # ... computed by more than pointwise and view ops
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            # Only true constants: live state (parameters, buffers) changes between calls.
            if node.meta.get("constant"):
                constant.add(node)
                from_state.add(node)
            continue
        inputs = node.all_input_nodes
        if not is_pure(node) or any(i not in constant for i in inputs) or _too_large(node):
            continue
        if not inputs and not _is_factory(node):
            continue
        constant.add(node)
        if any(i in from_state for i in inputs):
            from_state.add(node)
        if any(i in involved for i in inputs) or (inputs and not _cheap(node)):
            involved.add(node)

    values: dict = {}
    position = {node: k for k, node in enumerate(gm.graph.nodes)}

    def value_of(node):
        """``node``'s value, evaluated once with what it needs (only what is stored is ever
        evaluated), in graph order."""
        needed, pending = set(), [node]
        while pending:
            n = pending.pop()
            if n not in values and n not in needed:
                needed.add(n)
                pending.extend(n.all_input_nodes)
        for n in sorted(needed, key=position.__getitem__):
            if n.op == "get_attr":
                values[n] = getattr(gm, n.target)
            else:
                values[n] = n.target(*_materialize(n.args, values), **_materialize(n.kwargs, values))
        return values[node]

    stored: dict = {}
    kept: set = set()

    def provide(first) -> None:
        """Make ``first``'s value available at run time: stored, or computed from its inputs
        (each made available in turn; a loop, not recursion: constant chains may be long)."""
        pending = [first]
        while pending:
            node = pending.pop()
            if node in stored or node in kept or node.op == "get_attr":
                continue
            worth = (node in from_state or node in involved) and not _is_view(node)   # a view costs nothing
            if worth and (_numel(node) or 0) <= max_numel:   # no traced value: judged by the evaluated one
                try:
                    value = value_of(node)
                except Exception:   # noqa: BLE001 (a factory for a device this process lacks, ...): not folded
                    value = None
                if isinstance(value, torch.Tensor) and value.numel() <= max_numel:
                    stored[node] = value
                    continue
            kept.add(node)
            pending.extend(i for i in node.all_input_nodes if i in constant)

    for node in list(gm.graph.nodes):
        if node in constant and any(user not in constant for user in node.users):
            provide(node)
    values.clear()
    for node, value in stored.items():
        name = _fresh_name(gm)
        gm.register_buffer(name, value)
        with gm.graph.inserting_before(node):
            const = gm.graph.get_attr(name)
        const.meta = dict(node.meta, constant=True)
        node.replace_all_uses_with(const)
    for node in reversed(list(stored)):
        if not node.users:
            gm.graph.erase_node(node)
    code_changed(gm)
    return gm


def _is_factory(node) -> bool:
    """A pure op of no tensor inputs that makes a tensor (``full``, ``arange``, ``scalar_tensor``)."""
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and isinstance(node.target, torch._ops.OpOverload)


def _numel(node):
    """Elements of ``node``'s traced tensor value; None for no tensor or a symbolic size."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return int(val.numel())
    except TypeError:
        return None


def _too_large(node) -> bool:
    """A symbolic size (not a constant), or more elements than are ever evaluated ahead."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return False
    numel = _numel(node)
    return numel is None or numel > MAX_EVALUATED_NUMEL


def _cheap(node) -> bool:
    """An op that is no more than index arithmetic over its inputs where it is computed."""
    op = node.target
    return isinstance(op, torch._ops.OpOverload) and (torch.Tag.pointwise in op.tags or _is_view(node))


def _is_view(node) -> bool:
    op = node.target
    return isinstance(op, torch._ops.OpOverload) and any(r.alias_info is not None for r in op._schema.returns)


def _materialize(arg, values):
    return torch.fx.node.map_arg(arg, values.__getitem__)


def _fresh_name(gm) -> str:
    i = 0
    while hasattr(gm, f"_folded{i}"):
        i += 1
    return f"_folded{i}"
