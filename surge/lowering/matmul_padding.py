"""Matmuls with 16-bit operands padded to aligned sizes on CUDA.

cuBLAS picks its fast (tensor-memory-accelerated) kernels only when every
matrix's leading dimension is a multiple of 16 bytes. A language model's head
multiplies by a vocabulary of 50257 rows: the output's rows are 50257 elements
apart and cuBLAS falls back to a kernel several times slower (on an H200,
8192x768 @ 768x50257 in bf16 took 6.7 ms; with the weight padded to 50264 rows,
0.90 ms plus 0.04 ms to pad). So a large enough ``mm``/``addmm`` whose N or K
is not a multiple of 8 elements gets zero-padded operands (a copy kernel each,
laid out as the operand was), runs on the padded sizes, and its result is the
unpadded slice: a view of the padded output, whose rows stay N_pad apart, as
torch.compile returns it. Padding K needs zero columns in both operands, which
leave the products unchanged; padding N adds output columns that nobody reads.

Padding pays only when the time cuBLAS saves is more than the copies cost:
``worth_padding`` estimates both from the sizes (a misaligned matmul runs at a
fraction of the aligned rate, in FLOPs and in bytes; copies run at memory
bandwidth). Measured on an H200 (eager vs padded, copies included): 16x768 @
768x50257 0.106 vs 0.069 ms, 8192 rows 6.67 vs 0.94 ms, 8192x50257 @ 50257x768
5.44 vs 1.89 ms; a 512x1000x1000 matmul is faster left alone (0.019 vs 0.043 ms).

With a symbolic row count (a batch times a sequence length, in a graph compiled for
every length) K and N are still numbers: the operands are padded the same way and the
decision is taken at the example's rows, with no guard (it changes speed, not results).
Such a graph's unpadded slice is then copied where it is reshaped (views of symbolic
sizes are not strided views yet). On an H200, a GPT head left misaligned in a symbolic
graph took 1.68 ms against 0.23 ms padded in the static one (bench/NOTES.md).
"""
from __future__ import annotations

import sympy
import torch

from .ir import ExternResult, Layout
from .matmul_operands import realize_transposed, strided_view
from .ops_view import index_less, slice_
from .registry import NotLowered, register_lowering
from .tensor import LazyTensor
from .values import Masked, Op

aten = torch.ops.aten

ALIGN_ELEMENTS = 8           # 16 bytes of bf16/fp16
PADDED_DTYPES = (torch.bfloat16, torch.float16)
# A matrix-vector product (a few rows) runs a kernel that does not mind misaligned rows.
MIN_ROWS = 16
# H200 rates measured with bench/gpu_diag.py (bench/NOTES.md, "Matmul padding"): cuBLAS
# on misaligned and on aligned bf16 operands, copy bandwidth, one copy kernel's launch.
MISALIGNED_FLOPS, MISALIGNED_BYTES_PER_S = 100e12, 0.75e12
ALIGNED_FLOPS, ALIGNED_BYTES_PER_S = 600e12, 3.0e12
COPY_BYTES_PER_S = 3.0e12
LAUNCH_S = 8e-6


def _round_up(n: int, to: int = ALIGN_ELEMENTS) -> int:
    return -(-n // to) * to


def worth_padding(m: int, k: int, n: int, pad_k: bool, pad_n: bool, itemsize: int) -> bool:
    """Whether the copies cost less than the time a misaligned matmul loses.

    Either kind of matmul is bound by its FLOPs or by reading its operands, whichever
    takes longer; misaligned kernels are slower at both."""
    if m < MIN_ROWS:
        return False
    flops = 2.0 * m * n * k
    moved = (m * k + k * n + m * n) * itemsize
    misaligned = max(flops / MISALIGNED_FLOPS, moved / MISALIGNED_BYTES_PER_S)
    aligned = max(flops / ALIGNED_FLOPS, moved / ALIGNED_BYTES_PER_S)
    copied = (m * k if pad_k else 0) + (k * n if pad_k or pad_n else 0)   # elements of padded operands
    copies = (1 if pad_k else 0) + (1 if pad_k or pad_n else 0)
    return misaligned - aligned > 2 * copied * itemsize / COPY_BYTES_PER_S + copies * LAUNCH_S


def _padded_operand(ctx, t: LazyTensor, rows, cols: int) -> LazyTensor:
    """``t`` (a matrix) zero-padded to ``rows`` x ``cols``, as a view of a new buffer laid out
    the way ``t`` is (a transposed weight stays transposed, so the copy reads and writes
    along memory and BLAS reads it as before). Only static dimensions are padded: the
    rows of the left operand may be symbolic (``rows`` is then ``t``'s own)."""
    r, c = t.shape
    pad_rows = not ctx.sizes.known_equal(rows, r)
    found = strided_view(t, ctx.sizes)
    transposed = found is not None and found[1].stride[-2] == 1 and found[1].stride[-1] != 1

    def load(idx):
        i, j = idx
        conds = [cond for cond in (index_less(i, ctx.sizes.static(r)) if pad_rows else None,
                                   index_less(j, ctx.sizes.static(c)) if cols != ctx.sizes.static(c) else None)
                 if cond is not None]
        mask = conds[0] if len(conds) == 1 else Op("logical_and", conds, torch.bool)
        return Masked(mask, t.load([i, j]), 0)

    padded = LazyTensor((ctx.sizes.expr(rows), sympy.Integer(cols)), t.dtype, t.device, loader=load)
    return realize_transposed(ctx, padded) if transposed else ctx.realize(padded)


def _padded_bias(ctx, bias: LazyTensor, n: int, n_pad: int) -> LazyTensor:
    """A 1-D (or 1 x N) bias zero-padded to ``n_pad`` columns."""
    def load(idx):
        inner = [0] * (bias.ndim - 1) + [idx[0]]
        return Masked(index_less(idx[0], n), bias.load(inner), 0)
    return ctx.realize(LazyTensor((sympy.Integer(n_pad),), bias.dtype, bias.device, loader=load))


def _plan(ctx, a, b):
    """(m, k, n, k_pad, n_pad) when this matmul is padded, else raises ``NotLowered``."""
    if not ctx.target.pad_matmuls(ctx.config):
        raise NotLowered("matmul padding is off")
    if not (isinstance(a, LazyTensor) and isinstance(b, LazyTensor)) or a.ndim != 2 or b.ndim != 2:
        raise NotLowered("not two matrices")
    if a.dtype not in PADDED_DTYPES or b.dtype != a.dtype:
        raise NotLowered("not a 16-bit matmul")
    k, n = ctx.sizes.static(a.shape[1]), ctx.sizes.static(b.shape[1])
    if None in (k, n):   # unpadded is right for every size; padding these would need guards
        raise NotLowered("symbolic inner or output size")
    # The rows (a batch times a sequence length) may be symbolic: they are never padded,
    # and whether padding pays is a speed choice, taken at the example's rows, no guard.
    m = ctx.sizes.expr(a.shape[0])
    rows = ctx.sizes.static(m)
    rows = ctx.sizes.hint(m) if rows is None else rows
    k_pad, n_pad = (_round_up(k) if k % ALIGN_ELEMENTS else k), (_round_up(n) if n % ALIGN_ELEMENTS else n)
    if (k_pad, n_pad) == (k, n) or min(rows, k, n) == 0:
        raise NotLowered("sizes already aligned")
    if not worth_padding(rows, k, n, k_pad != k, n_pad != n, a.dtype.itemsize):
        raise NotLowered("too small to gain from padding")
    return m, k, n, k_pad, n_pad


def _padded_call(ctx, target, a, b, bias=None, **scalars):
    m, k, n, k_pad, n_pad = _plan(ctx, a, b)
    a_arg = _padded_operand(ctx, a, m, k_pad) if k_pad != k else a
    b_arg = _padded_operand(ctx, b, k_pad, n_pad)
    rows = ctx.sizes.static(m)
    result = (torch.empty((rows, n_pad), dtype=a.dtype, device="meta") if rows is not None
              else ExternResult(Layout.contiguous((m, sympy.Integer(n_pad))), a.dtype))
    if bias is None:
        out = ctx.extern(target, (a_arg, b_arg), {}, result_meta=result)
    else:
        bias_arg = _padded_bias(ctx, bias, n, n_pad) if n_pad != n else bias
        out = ctx.extern(target, (bias_arg, a_arg, b_arg), scalars, result_meta=result)
    return slice_(ctx, out, 1, 0, n) if n_pad != n else out


@register_lowering(aten.mm.default)
def padded_mm(ctx, a, b):
    return _padded_call(ctx, aten.mm.default, a, b)


@register_lowering(aten.addmm.default)
def padded_addmm(ctx, bias, a, b, *, beta=1, alpha=1):
    if not isinstance(bias, LazyTensor) or bias.ndim == 0 or bias.ndim > 2 or (
            bias.ndim == 2 and bias.shape[0] != 1) or not ctx.sizes.known_equal(bias.shape[-1], b.shape[-1]):
        raise NotLowered("bias other than a row vector")
    scalars = {k: v for k, v in (("beta", beta), ("alpha", alpha)) if v != 1}
    return _padded_call(ctx, aten.addmm.default, a, b, bias, **scalars)
