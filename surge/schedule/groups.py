"""Scheduled steps: fused kernel groups and extern calls, in execution order.

A ``KernelGroup`` is one loop nest over ``x_ranges`` (parallel) and, for a
reduction group, ``r_ranges`` (reduced). Each member buffer plays one role:

- ``reduction``: reduces over the r loops, one result per x point;
- ``xr``: pointwise over x + r (prologues and epilogues of the reductions);
- ``x``: pointwise over x alone (per-row values, or every member of a
  pointwise group);
- ``column``: a sum over the x loops, one result per r point (a sum over the
  batch dim of values a row kernel computes: LayerNorm weight and Linear bias
  gradients). Only a target-specific pass adds such members
  (``column_fusion.py``); the role is kept by name, since for a square space
  the sizes alone cannot tell a column sum from a row reduction.

Inside a group a member reads another member's result from registers when it
reads it at the very element the other computes; the scheduler fuses only
such pairs. Kernel index symbols are ``x0, x1, ...`` and ``r0, r1, ...``.
"""
from __future__ import annotations

import dataclasses

import sympy

from ..lowering.ir import ComputedBuffer, ExternBuffer
from ..lowering.size_vars import static_int
from ..lowering.sizes import index_symbol, simplify_with_ranges


@dataclasses.dataclass(eq=False)
class KernelGroup:
    index: int
    x_ranges: tuple
    r_ranges: tuple
    nodes: list                                   # ComputedBuffer, in dependency order
    stores: list = dataclasses.field(default_factory=list)    # buffer names written to memory
    internal: list = dataclasses.field(default_factory=list)  # results that stay in registers
    name: str = ""
    columns: set = dataclasses.field(default_factory=set)    # names of the ``column`` members

    @property
    def is_reduction(self) -> bool:
        return any(n.is_reduction for n in self.nodes)

    def role(self, node: ComputedBuffer) -> str:
        if node.name in self.columns:
            return "column"
        return node_role(node, self.x_ranges, self.r_ranges)

    def var_mapping(self, node: ComputedBuffer) -> dict:
        """The node's loop symbols as expressions of the kernel symbols."""
        if node.name in self.columns:
            return column_var_mapping(node, self.x_ranges, self.r_ranges)
        return var_mapping(node, self.x_ranges, self.r_ranges)

    def kernel_index(self, node: ComputedBuffer, expr: sympy.Expr) -> sympy.Expr:
        return simplify_with_ranges(expr.xreplace(self.var_mapping(node)),
                                    kernel_bounds(self.x_ranges, self.r_ranges))

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


def _runs(node_sizes, dims):
    """Each of ``node_sizes`` as a run of consecutive ``dims`` with the same product,
    or None. A member may iterate a coarser view of the group's space (softmax over
    [B, H, T | T] read back as [B*H, T, T] for a batched matmul)."""
    if tuple(node_sizes) == tuple(dims):
        return [(k, k + 1) for k in range(len(dims))]
    if not all(getattr(s, "is_Integer", False) for s in tuple(node_sizes) + tuple(dims)):
        return _symbolic_runs(node_sizes, dims)
    runs, j = [], 0
    for size in node_sizes:
        start, prod = j, 1
        while j < len(dims) and prod < static_int(size):
            prod *= static_int(dims[j])
            j += 1
        if prod != static_int(size) or j == start:
            return None
        runs.append((start, j))
    return runs if j == len(dims) else None


def _symbolic_runs(node_sizes, dims):
    """``_runs`` where sizes are expressions: each node size must be a product of
    consecutive dims for every value of the size symbols."""
    runs, j = [], 0
    for size in node_sizes:
        start, prod = j, sympy.Integer(1)
        while j < len(dims) and (j == start or sympy.expand(prod - size) != 0):
            prod = prod * dims[j]
            j += 1
        if sympy.expand(prod - size) != 0:
            return None
        runs.append((start, j))
    return runs if j == len(dims) else None


def _space_runs(node: ComputedBuffer, x_ranges, r_ranges):
    """(role, runs): ``node``'s loop dims as runs of the group's dims (x then r)."""
    x, r = tuple(x_ranges), tuple(r_ranges)
    if node.is_reduction:
        xr, rr = _runs(node.ranges, x), _runs(node.reduction_ranges, r)
        if xr is None or rr is None:
            return None, None
        return "reduction", xr + [(a + len(x), b + len(x)) for a, b in rr]
    if r:
        runs = _runs(node.ranges, x + r)
        if runs is not None and all(b <= len(x) or a >= len(x) for a, b in runs):
            return "xr", runs
    runs = _runs(node.ranges, x)
    if runs is not None:
        return "x", runs
    return None, None


def kernel_bounds(x_ranges, r_ranges) -> dict:
    """Kernel symbol -> its loop's extent."""
    bounds = {index_symbol("x", k): s for k, s in enumerate(x_ranges)}
    bounds.update({index_symbol("r", k): s for k, s in enumerate(r_ranges)})
    return bounds


def node_role(node: ComputedBuffer, x_ranges, r_ranges) -> str | None:
    return _space_runs(node, x_ranges, r_ranges)[0]


def var_mapping(node: ComputedBuffer, x_ranges, r_ranges) -> dict:
    """The node's loop symbols (i*, r*) as expressions of the kernel symbols (x*, r*)."""
    _, runs = _space_runs(node, x_ranges, r_ranges)
    return _mapping(node, x_ranges, r_ranges, runs)


def column_runs(node: ComputedBuffer, x_ranges, r_ranges):
    """Runs of the group's dims (x then r) for a sum over the x loops: the node's own
    loops run along the group's r dims and its reduction loops along the x dims; None
    when the sizes do not line up."""
    if not node.is_reduction or not x_ranges or not r_ranges:
        return None
    own, reduced = _runs(node.ranges, tuple(r_ranges)), _runs(node.reduction_ranges, tuple(x_ranges))
    if own is None or reduced is None:
        return None
    n_x = len(x_ranges)
    return [(a + n_x, b + n_x) for a, b in own] + reduced


def column_var_mapping(node: ComputedBuffer, x_ranges, r_ranges) -> dict:
    """``var_mapping`` for a ``column`` member."""
    return _mapping(node, x_ranges, r_ranges, column_runs(node, x_ranges, r_ranges))


def _mapping(node: ComputedBuffer, x_ranges, r_ranges, runs) -> dict:
    dims = tuple(x_ranges) + tuple(r_ranges)
    n_x = len(x_ranges)
    kernel_syms = [index_symbol("x", k) for k in range(n_x)] + [index_symbol("r", k) for k in range(len(r_ranges))]
    mapping = {}
    for var, (a, b) in zip(tuple(node.index_vars) + tuple(node.reduction_vars), runs):
        expr, scale = sympy.Integer(0), sympy.Integer(1)
        for j in reversed(range(a, b)):
            expr += kernel_syms[j] * scale
            scale *= dims[j]
        mapping[var] = expr
    return mapping
