"""Scheduled steps: fused kernel groups and extern calls, in execution order.

A ``KernelGroup`` is one loop nest over ``x_ranges`` (parallel) and, for a
reduction group, ``r_ranges`` (reduced). Each member buffer plays one role:

- ``reduction``: reduces over the r loops, one result per x point;
- ``xr``: pointwise over x + r (prologues and epilogues of the reductions);
- ``x``: pointwise over x alone (per-row values, or every member of a
  pointwise group).

Inside a group a member reads another member's result from registers when it
reads it at the very element the other computes; the scheduler fuses only
such pairs. Kernel index symbols are ``x0, x1, ...`` and ``r0, r1, ...``.
"""
from __future__ import annotations

import dataclasses

import sympy

from ..lowering.ir import ComputedBuffer, ExternBuffer
from ..lowering.sizes import index_symbol


@dataclasses.dataclass(eq=False)
class KernelGroup:
    index: int
    x_ranges: tuple
    r_ranges: tuple
    nodes: list                                   # ComputedBuffer, in dependency order
    stores: list = dataclasses.field(default_factory=list)    # buffer names written to memory
    internal: list = dataclasses.field(default_factory=list)  # results that stay in registers
    name: str = ""

    @property
    def is_reduction(self) -> bool:
        return any(n.is_reduction for n in self.nodes)

    def role(self, node: ComputedBuffer) -> str:
        return node_role(node, self.x_ranges, self.r_ranges)

    def kernel_index(self, node: ComputedBuffer, expr: sympy.Expr) -> sympy.Expr:
        return expr.xreplace(var_mapping(node, self.role(node), len(self.x_ranges)))

    def member(self, name: str):
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def origins(self) -> list:
        seen = []
        for n in self.nodes:
            for o in n.origins:
                if o not in seen:
                    seen.append(o)
        return seen

    def __str__(self) -> str:
        space = ", ".join(map(str, self.x_ranges))
        if self.r_ranges:
            space += " | " + ", ".join(map(str, self.r_ranges))
        members = ", ".join(f"{n.name}({self.role(n)})" for n in self.nodes)
        internal = f"; in registers: {', '.join(self.internal)}" if self.internal else ""
        return f"kernel {self.name} [{space}]: {members}; stores {', '.join(self.stores)}{internal}"


@dataclasses.dataclass(eq=False)
class ExternStep:
    index: int
    buffer: ExternBuffer

    @property
    def name(self) -> str:
        return self.buffer.name

    def __str__(self) -> str:
        return f"extern {self.buffer}"


def node_role(node: ComputedBuffer, x_ranges, r_ranges) -> str | None:
    if node.is_reduction:
        if tuple(node.ranges) == tuple(x_ranges) and tuple(node.reduction_ranges) == tuple(r_ranges):
            return "reduction"
        return None
    if r_ranges and tuple(node.ranges) == tuple(x_ranges) + tuple(r_ranges):
        return "xr"
    if tuple(node.ranges) == tuple(x_ranges):
        return "x"
    return None


def var_mapping(node: ComputedBuffer, role: str, n_x: int) -> dict:
    """The node's loop symbols (i*, r*) as kernel symbols (x*, r*); ``n_x`` x dims."""
    mapping = {}
    for k, var in enumerate(node.index_vars):
        mapping[var] = index_symbol("x", k) if role != "xr" or k < n_x else index_symbol("r", k - n_x)
    for k, var in enumerate(node.reduction_vars):
        mapping[var] = index_symbol("r", k)
    return mapping
