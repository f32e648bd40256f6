"""Which nodes a pass may remove, merge or evaluate ahead of time."""
from __future__ import annotations

import operator

import torch
import torch.fx


def writes_memory(node: torch.fx.Node) -> bool:
    op = node.target
    if isinstance(op, torch._ops.OpOverload):
        return any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)
    return False


def is_random(node: torch.fx.Node) -> bool:
    op = node.target
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in op.tags


def is_pure(node: torch.fx.Node) -> bool:
    """Same inputs, same result, no effect besides the result."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    return isinstance(node.target, torch._ops.OpOverload) and not writes_memory(node) and not is_random(node)
