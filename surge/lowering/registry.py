"""The per-op lowering registry: ``@register_lowering(aten.add.Tensor, ...)``.

A lowering takes the lowering context, then the node's arguments with tensors
replaced by ``LazyTensor``s, and returns a LazyTensor (or a tuple of them).
Registering an overload packet (``aten.sum``) covers every overload of it that
has no registration of its own. A lowering may raise ``NotLowered`` for
arguments it does not handle; the node then becomes an extern call to ATen.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..registry import rule_registrar

LOWERINGS: dict = {}


class NotLowered(Exception):
    """This call of the op is not lowered; call ATen for it instead."""


register_lowering = rule_registrar(LOWERINGS)


def lowering_for(target) -> Callable | None:
    fn = LOWERINGS.get(target)
    if fn is None and isinstance(target, torch._ops.OpOverload):
        fn = LOWERINGS.get(target.overloadpacket)
    return fn

