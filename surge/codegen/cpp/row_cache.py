"""Which values a reduction kernel keeps in a per-row scratch array instead of recomputing.

A reduction kernel walks each row several times: once per reduction stage and
once more for the row's outputs. A value that two passes need (softmax's
``exp(x - max)``: summed in the second pass, divided in the last) would be
computed in each of them. When it is costly (it contains a transcendental
call) and the row is small enough to stay in L1/L2, the first pass that
computes it also stores it into a stack array of ``rnumel`` elements, and
later passes load it back: a transcendental per element traded for an L1 load.
"""
from __future__ import annotations

from ...lowering.op_groups import COSTLY_OPS   # far more than a load from L1
from ...lowering.values import IndexValue, Load, Masked, Op


# The scratch arrays of one row stay below this many bytes: each OpenMP thread
# holds its own on its stack, and they should stay in the core's L2.
MAX_SCRATCH_BYTES = 64 * 1024


class RowCachePlanner:
    """``plan(passes)`` -> the values (by id) to store in the first pass that computes them.

    ``passes`` is the list of each pass's root values, in execution order;
    ``depends_on_r(v)`` and ``member(buffer)`` come from the kernel writer.
    """

    def __init__(self, depends_on_r, member, rnumel: int, itemsize_of):
        self.depends_on_r = depends_on_r
        self.member = member
        self.rnumel = rnumel
        self.itemsize_of = itemsize_of
        self._costly: dict[int, bool] = {}

    def children(self, v) -> list:
        """The values ``v`` is computed from, as the kernel writer emits them."""
        if isinstance(v, Load):
            m = self.member(v.buffer)
            if m is None:
                return list(v.children)
            return [] if m.role == "reduction" else [m.value]
        if isinstance(v, Op):
            return list(v.children)
        return []   # constants, indices; masked values are computed under their condition

    def costly(self, v) -> bool:
        found = self._costly.get(id(v))
        if found is None:
            found = (isinstance(v, Op) and v.op in COSTLY_OPS) or any(self.costly(c) for c in self.children(v))
            self._costly[id(v)] = found
        return found

    def plan(self, passes: list) -> dict:
        first_pass: dict[int, int] = {}
        cached: dict[int, object] = {}
        budget = MAX_SCRATCH_BYTES
        for p, roots in enumerate(passes):
            visited: set = set()
            stack = list(roots)
            while stack:
                v = stack.pop()
                if id(v) in visited or isinstance(v, (Masked, IndexValue)) or not self.depends_on_r(v):
                    continue
                visited.add(id(v))
                earlier = first_pass.get(id(v))
                if earlier is not None and earlier < p and self.costly(v):
                    size = self.rnumel * self.itemsize_of(v)
                    if id(v) in cached or size <= budget:
                        if id(v) not in cached:
                            budget -= size
                        cached[id(v)] = v
                        continue   # loaded, not recomputed: its inputs are not needed here
                first_pass.setdefault(id(v), p)
                stack.extend(self.children(v))
        return cached
