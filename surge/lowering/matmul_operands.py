"""Matmul operands read in place: a lazy value that only re-indexes one buffer.

The aot layer spells ``q @ k.transpose(-2, -1)`` as ``bmm(view(expand(q)),
view(clone(expand(permute(k)))))``: the clone asks for a contiguous copy that
BLAS does not need, since it takes either operand transposed. When such an
operand's every element is a plain load of one realized buffer at an affine
index, it is a strided view of that buffer; if the view is one BLAS reads as
is (unit stride along one of the two matrix dims), the matmul gets the view
and no copy kernel runs.
"""
from __future__ import annotations

import sympy
import torch

from .ir import Layout
from .sizes import index_symbol, is_index_symbol, linear_coefficient, simplify_with_ranges
from .tensor import LazyTensor
from .values import Load, walk

aten = torch.ops.aten

# Ops whose tensor arguments are matrices (or batches of them) that BLAS reads with
# any leading dimension, either one transposed.
MATMUL_OPS = frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default})


# Ops through which a matmul still reads its operand's buffer in place (as a strided view).
VIEW_OPS = frozenset({aten.permute.default, aten.t.default, aten.transpose.int, aten.view.default,
                       aten._unsafe_view.default, aten.reshape.default, aten.expand.default})


def feeds_matmul(node) -> bool:
    """Some user of ``node`` is a matmul operand, directly or through views.

    Such a value is realized for the matmul anyway; other users should read that
    buffer rather than recompute it (a Linear's output gradient feeds the input
    gradient's mm, the weight gradient's mm through a transpose, and the bias sum).
    """
    pending, seen = list(node.users), set()
    while pending:
        user = pending.pop()
        if user in seen or user.op != "call_function":
            continue
        seen.add(user)
        if user.target in MATMUL_OPS:
            return True
        if user.target in VIEW_OPS:
            pending.extend(user.users)
    return False


def strided_view(t: LazyTensor, sizes):
    """(buffer name, Layout) when every element of ``t`` is ``buffer[offset + sum(i*stride)]``,
    with strides and offset that are non-negative for every size in range (``sizes``, the
    graph's ``SizeVars``): a symbolic size may be a factor of them (a row of ``s0*192``)."""
    if t.view is not None:
        return t.view
    if not t.ndim:
        return None
    symbols = [index_symbol("i", k) for k in range(t.ndim)]
    probe = t.load(symbols)
    if not isinstance(probe, Load) or probe.indirect or probe.dtype != t.dtype:
        return None
    index = simplify_with_ranges(probe.index, dict(zip(symbols, t.shape)))
    offset = index.xreplace({s: 0 for s in symbols})
    strides = []
    for sym, size in zip(symbols, t.shape):
        coeff = linear_coefficient(index, sym)
        if coeff is None or any(is_index_symbol(s) for s in coeff.free_symbols) or not sizes.known_leq(0, coeff):
            return None
        strides.append(coeff)
    # affine in each index alone is not affine in all of them together (``i0*i0``)
    if sympy.expand(index - offset - sum(c * s for c, s in zip(strides, symbols))) != 0:
        return None
    if not sizes.known_leq(0, offset):
        return None
    strides = [sympy.Integer(0) if size == 1 else c for c, size in zip(strides, t.shape)]
    return probe.buffer, Layout(tuple(t.shape), tuple(strides), offset)


def blas_readable(layout: Layout, sizes) -> bool:
    """The last two dims are a matrix BLAS takes as is, plain or transposed, for every size
    in range: unit stride along one of them, and the other's stride (the leading dimension)
    at least that dim's extent and at least 1."""
    if len(layout.shape) < 2:
        return False
    (rows, cols), (row_stride, col_stride) = layout.shape[-2:], layout.stride[-2:]
    if sizes.known_equal(col_stride, 1) and sizes.known_leq(cols, row_stride) and sizes.known_leq(1, row_stride):
        return True
    return sizes.known_equal(row_stride, 1) and sizes.known_leq(rows, col_stride) and sizes.known_leq(1, col_stride)


def matmul_operand_view(target, t: LazyTensor, sizes):
    """The in-place view of a matmul operand, or None where it must be computed."""
    if target not in MATMUL_OPS or not isinstance(t, LazyTensor) or t.view is not None:
        return None
    found = strided_view(t, sizes)
    if found is None or not blas_readable(found[1], sizes):
        return None
    return found


def reads_down_columns(t: LazyTensor) -> bool:
    """Whether computing ``t`` (a matrix or a batch of them) reads memory along its rows'
    index rather than its columns': the loads have stride 1 along dim -2 and not along -1.
    K of ``q @ k.transpose(-2, -1)`` is such a value: computed row by row, every element
    read would be a separate memory transaction. A speed choice only (either layout holds
    the same values), so symbolic sizes need no proof here."""
    if t.ndim < 2:
        return False
    symbols = [index_symbol("i", k) for k in range(t.ndim)]
    down = across = 0
    for value in walk(t.load(symbols)):
        if not isinstance(value, Load) or value.indirect:
            continue
        index = simplify_with_ranges(value.index, dict(zip(symbols, t.shape)))
        rows, cols = linear_coefficient(index, symbols[-2]), linear_coefficient(index, symbols[-1])
        if rows == 1 and cols not in (0, 1):
            down += 1
        elif cols == 1:
            across += 1
    return down > across


def realize_matmul_operand(ctx, t: LazyTensor) -> LazyTensor:
    """``t`` realized for a matmul: contiguous, or, when it reads down columns, computed as
    the transposed matrices it reads (reads and writes along memory) and viewed transposed,
    which BLAS takes as is."""
    if t.view is not None or not reads_down_columns(t):
        return ctx.realize(t)
    return realize_transposed(ctx, t)


def realize_transposed(ctx, t: LazyTensor) -> LazyTensor:
    """``t`` (a matrix or a batch of them) computed as its transpose, contiguous, and viewed
    back in ``t``'s shape: each matrix is stored column by column."""
    shape = tuple(t.shape)
    swapped = shape[:-2] + (shape[-1], shape[-2])

    def load(idx):
        return t.load(list(idx[:-2]) + [idx[-1], idx[-2]])
    physical = LazyTensor(swapped, t.dtype, t.device, loader=load)
    physical.origins = t.origins
    name, layout = ctx.realize(physical).view
    stride = tuple(layout.stride[:-2]) + (layout.stride[-1], layout.stride[-2])
    return LazyTensor.of_buffer(name, Layout(shape, stride, layout.offset), t.dtype, t.device)
