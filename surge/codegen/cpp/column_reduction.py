"""Column reductions: reduce along a strided dim, many columns at once.

A reduction whose rows are strided in memory and whose neighbouring rows are
neighbours in memory — a sum over the batch dim of a ``[batch, features]``
tensor, as every bias and LayerNorm weight gradient is — reads one float per
cache line when written row by row: each step of the r loop jumps a whole row
ahead. Here the kernel takes a block of ``COLUMN_BLOCK`` rows (x points) at a
time and keeps one accumulator per row in a small array; the r loops run
outside and an ``omp simd`` loop over the block runs inside, so every load is
a contiguous vector and each accumulator lane is one row. Blocks run in
parallel. Each lane sums its row in the same order as the row-by-row loop
(sequentially along r), so results do not depend on the block size.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from ...lowering.reductions import ReductionKind, reduction_kind
from ...lowering.sizes import index_symbol, linear_coefficient
from ...lowering.values import loads_of
from .scope import Scope

if TYPE_CHECKING:
    from .kernel import CppKernelWriter

# Rows per block: 64 floats are four 512-bit vectors of independent accumulators per
# reduction, and a block's loads of one r step are four whole cache lines.
COLUMN_BLOCK = 64

def per_lane(kind: ReductionKind) -> bool:
    """Reductions done per lane: one pass, no position. var (two passes) and argmax/argmin
    keep the row-by-row loop."""
    return not kind.tracks_index and kind.combine != "moments"


def _strides(writer: CppKernelWriter, index: sympy.Expr) -> tuple:
    """(stride along the innermost r dim, stride along x0) of an index; None where not affine."""
    expr = writer.affine(index)
    out = []
    for sym in (index_symbol("r", len(writer.r_sizes) - 1), index_symbol("x", 0)):
        coeff = linear_coefficient(expr, sym)
        out.append(int(coeff) if coeff is not None and coeff.is_Integer else None)
    return tuple(out)


def wants_columns(writer: CppKernelWriter) -> bool:
    """Most memory accesses of the r loops are contiguous along x and strided along r."""
    plan = writer.plan
    if len(writer.x_sizes) != 1 or not writer.r_sizes or writer.x_sizes[0] < 2:
        return False
    reductions = [m for m in plan.members if m.role == "reduction"]
    if not all(per_lane(reduction_kind(m.buffer.reduction_type)) for m in reductions):
        return False
    indices = []
    for m in plan.members:
        if m.role in ("reduction", "xr"):
            indices += [ld.index for ld in loads_of(m.value) if plan.member(ld.buffer) is None and not ld.indirect]
        if m.role == "xr" and m.stored:
            indices.append(m.store_index)
    column, row = 0, 0
    for index in indices:
        r_stride, x_stride = _strides(writer, index)
        if r_stride == 1:
            row += 1
        elif r_stride not in (0, None) and x_stride == 1:
            column += 1
    return column > row


def generate_columns(writer: CppKernelWriter, top: Scope) -> None:
    """The kernel's loops, block of rows by block of rows (see the module docstring)."""
    plan, block = writer.plan, min(COLUMN_BLOCK, writer.x_sizes[0])
    xnumel = writer.x_sizes[0]
    writer.lane = "[xi]"
    body = Scope("row", top)        # one block of rows; no hoisting: lanes differ per row
    for stage in range(plan.num_stages):
        members = [m for m in plan.members if m.role == "reduction" and m.stage == stage]
        for m in members:
            for t, name, start, _ in writer.accumulators(m):
                body.lines.append(f"alignas(64) {t} {name}[{block}];")
                body.lines.append(f"for (int64_t xi = 0; xi < {block}; ++xi) {name}[xi] = {start};")
        lanes = Scope("rloop", body)
        for m in members:
            writer.reduction_update(lanes, m)
        _r_loops_around_lanes(writer, body, lanes)
        finish = Scope("xloop", body)
        for m in members:
            writer.reduction_finish(finish, m)
        _lane_loop(body, finish)
    row_stores = [m for m in plan.members if m.stored and m.role == "xr"]
    if row_stores:
        lanes = Scope("rloop", body)
        for m in row_stores:
            writer.store(lanes, m)
        _r_loops_around_lanes(writer, body, lanes)
    stores = Scope("xloop", body)
    for m in plan.members:
        if m.stored and m.role != "xr":
            writer.store(stores, m)
    _lane_loop(body, stores)
    blocks = -(-xnumel // block)
    writer.parallel = writer.parallel and blocks > 1
    if writer.parallel:
        top.lines.append("#pragma omp parallel for schedule(static)")
    top.lines.append(f"for (int64_t xb = 0; xb < {xnumel}; xb += {block}) {{")
    top.lines.append(f"    const int64_t xn = std::min<int64_t>({block}, {xnumel} - xb);")
    top.lines.extend("    " + line for line in body.lines)
    top.lines.append("}")


def _lane_loop(outer: Scope, inner: Scope) -> None:
    """``inner``'s lines once per row of the block (x0 is the row)."""
    if not inner.lines:
        return
    outer.lines.append("#pragma omp simd")
    outer.lines.append("for (int64_t xi = 0; xi < xn; ++xi) {")
    outer.lines.append("    const int64_t x0 = xb + xi;")
    outer.lines.extend("    " + line for line in inner.lines)
    outer.lines.append("}")


def _r_loops_around_lanes(writer: CppKernelWriter, outer: Scope, lanes: Scope) -> None:
    """The r loops (outside) around one pass over the block's rows (inside)."""
    inner = Scope("rloop", outer)
    _lane_loop(inner, lanes)
    writer.loop_nest(outer, "r", writer.r_sizes, inner, {})
