"""Split reductions: a huge reduction over few rows as two reductions.

``x.sum()`` of 2**26 elements, or ``x.sum(0)`` of a (2**22, 8) tensor, has one
(or eight) rows: a reduction kernel runs one program per row (GPU) or one
thread per row (C++), so almost all of the machine idles. Such a reduction is
rewritten, in the loop IR, into

1. a reduction of ``S`` chunks of each row into partials (rows * S programs),
2. a reduction of the partials into the result (cheap: S elements per row).

It belongs to lowering, not to a code generator: both generators then see two
ordinary reductions. The rewrite per kind (the ``split`` rule of reductions.py's table):

- sum, prod, max, min, any, all: the same reduction twice (partial sums are
  summed, partial maxima maximized); partials keep the accumulator dtype.
- argmax/argmin: each chunk's extreme value and its position in the chunk; then
  the chunk with the extreme partial (the first, on ties, as eager) and the
  position it recorded: ``chunk * C + position``.
- var: two passes over the data, both split: the mean, then the sum of squared
  deviations from it (as exact as Welford's merge of partial moments, and made
  of sum reductions only).

A row that the chunks do not divide evenly is padded by masked lanes that hold
the reduction's neutral element.

Column reductions on GPUs (``x.sum(0)`` of an (8192, 4096) tensor: the bias and
LayerNorm weight gradients of a training step) have rows enough, but a GPU
kernel reads them in tiles of ``COLUMN_TILE`` neighbouring columns, so 4096
columns make only 64 programs. They are split too, with the chunk index
outermost (partials laid out [S, columns]), so that both kernels still read
along the columns.
"""
from __future__ import annotations

import math

import sympy
import torch

from .ir import Layout
from .reductions import REDUCTIONS, ReductionKind, reduction_kind
from .sizes import decompose, product
from .tensor import LazyTensor
from .values import Constant, IndexValue, Masked, Op, cast

# Split a reduction of at least this many elements per row ...
SPLIT_REDUCTION_MIN_ELEMENTS = 65536
# ... into chunks so that all rows together make about this many programs ...
TARGET_PROGRAMS = 1024
# ... each chunk holding at least threshold / CHUNK_DIVISOR elements.
CHUNK_DIVISOR = 16
# Neighbouring columns one GPU program of a column reduction reads (Triton's column tiles),
# and the fewest elements of a column per chunk.
COLUMN_TILE = 64
MIN_COLUMN_CHUNK = 256


def plan_split(rows: int, rnumel: int, threshold: int):
    """(chunks, chunk size), or None when the reduction has rows enough or is small."""
    if rnumel < threshold or rows >= TARGET_PROGRAMS // 2:
        return None
    min_chunk = max(threshold // CHUNK_DIVISOR, 2)
    splits = min(TARGET_PROGRAMS // rows, rnumel // min_chunk)
    if splits < 2:
        return None
    return _chunks(rnumel, splits)


def _chunks(rnumel: int, splits: int) -> tuple:
    """(chunks, chunk size) for about ``splits`` chunks of a row, preferring a count that
    divides the row (no masked lanes)."""
    for s in range(splits, max(splits // 2, 1), -1):
        if rnumel % s == 0:
            splits = s
            break
    chunk = math.ceil(rnumel / splits)
    return math.ceil(rnumel / chunk), chunk


def splits_columns(target) -> bool:
    """Column reductions are split for GPU kernels; C++ kernels parallelize over column blocks."""
    return target.splits_column_reductions


def is_column_reduction(shape, dims) -> bool:
    """Every reduced dim comes before every kept dim (of size > 1): in a contiguous tensor,
    neighbouring results read neighbouring elements."""
    kept = [d for d in range(len(shape)) if d not in dims and shape[d] != 1]
    return bool(kept) and max(dims) < min(kept)


def plan_column_split(columns: int, rnumel: int):
    """(chunks, chunk size) for a GPU column reduction with too few column tiles, or None."""
    tiles = -(-columns // COLUMN_TILE)
    if tiles >= TARGET_PROGRAMS // 2:
        return None
    splits = min(TARGET_PROGRAMS // tiles, rnumel // MIN_COLUMN_CHUNK)
    if splits < 2:
        return None
    return _chunks(rnumel, splits)


class _Split:
    """The index bookkeeping of one split: rows (outer dims) and chunks of the reduced dims.

    Partials are [outer..., S], or [S, outer...] with ``chunks_first`` (column reductions)."""

    def __init__(self, t: LazyTensor, dims: list, rnumel: int, splits: int, chunk: int, chunks_first: bool = False):
        self.t = t
        self.chunks_first = chunks_first
        self.dims = dims
        self.outer = [d for d in range(t.ndim) if d not in dims]
        self.red_sizes = [t.shape[d] for d in dims]
        self.rnumel = rnumel
        self.splits, self.chunk = splits, chunk
        # the result with every reduced dim kept (size 1)
        self.kept_shape = [sympy.Integer(1) if d in dims else s for d, s in enumerate(t.shape)]

    def partial_index(self, outer_index: list, chunk) -> list:
        """The index of a partial: its row's outer index and its chunk."""
        return [chunk] + list(outer_index) if self.chunks_first else list(outer_index) + [chunk]

    def chunks(self, source: LazyTensor, reduction_type: str) -> LazyTensor:
        """``source`` as [outer..., S, C] (or [S, outer..., C]): chunk ``s`` holds elements
        ``s*C ... s*C + C - 1`` of a row."""
        outer_shape = [source.shape[d] for d in self.outer]
        shape = self.partial_index(outer_shape, sympy.Integer(self.splits)) + [sympy.Integer(self.chunk)]
        padded = self.splits * self.chunk != self.rnumel
        neutral = reduction_kind(reduction_type).identity_value(source.dtype)

        def load(idx):
            chunk_index, outer_index = (idx[0], idx[1:-1]) if self.chunks_first else (idx[-2], idx[:-2])
            flat = chunk_index * self.chunk + idx[-1]
            full = [sympy.Integer(0)] * source.ndim
            for d, i in zip(self.outer, outer_index):
                full[d] = i
            for d, i in zip(self.dims, decompose(flat, self.red_sizes)):
                full[d] = i
            value = source.load(full)
            if padded:
                inside = Op("lt", [IndexValue(flat), Constant(self.rnumel, torch.int64)], torch.bool)
                value = Masked(inside, value, neutral)
            return value
        out = LazyTensor(shape, source.dtype, source.device, loader=load)
        out.origins = source.origins
        return out

    def partials_by_row(self, partial: LazyTensor) -> LazyTensor:
        """The partials read as [kept shape..., S] (reduced dims of size 1)."""
        def load(idx):
            return partial.load(self.partial_index([idx[d] for d in self.outer], idx[-1]))
        return LazyTensor(self.kept_shape + [sympy.Integer(self.splits)], partial.dtype, partial.device, loader=load)

    def row_value(self, buf: LazyTensor, idx):
        """A kept-shape result at the row of ``idx`` (an index over the input's dims)."""
        return buf.load([sympy.Integer(0) if d in self.dims else i for d, i in enumerate(idx)])

    def finish(self, ctx, kept: LazyTensor, keepdim: bool) -> LazyTensor:
        """The kept-shape result realized, viewed without the reduced dims unless ``keepdim``."""
        kept = ctx.realize(kept) if kept.view is None else kept
        if keepdim:
            return kept
        name, layout = kept.view
        shape = [s for d, s in enumerate(layout.shape) if d not in self.dims]
        stride = [s for d, s in enumerate(layout.stride) if d not in self.dims]
        return LazyTensor.of_buffer(name, Layout(tuple(shape), tuple(stride), layout.offset), kept.dtype, kept.device)


def split_reduction(ctx, t: LazyTensor, dims, keepdim: bool, reduction_type: str, dtype: torch.dtype,
                    acc_dtype: torch.dtype, correction: float, threshold: int) -> LazyTensor | None:
    """The reduction as two reductions when it is huge and has few rows, else None."""
    # symbolic sizes: one reduction, which is right for every size (a split would need guards)
    rows = ctx.sizes.static(product(t.shape[d] for d in range(t.ndim) if d not in dims))
    rnumel = ctx.sizes.static(product(t.shape[d] for d in dims))
    if not t.ndim or not dims or rows is None or rnumel is None:
        return None
    plan = plan_split(rows, rnumel, threshold)
    columns = plan is None and splits_columns(ctx.target) and is_column_reduction(t.shape, dims)
    if columns:
        plan = plan_column_split(rows, rnumel)
    if plan is None:
        return None
    split = _Split(t, list(dims), rnumel, *plan, chunks_first=columns)
    kind = reduction_kind(reduction_type)
    if kind.split == "arg":
        return _split_arg(ctx, split, kind, keepdim)
    if kind.split == "two_pass":
        return _split_var(ctx, split, dtype, acc_dtype, correction, keepdim)
    assert kind.split == "same", kind
    return split.finish(ctx, _two_stage(ctx, split, t, reduction_type, dtype, acc_dtype), keepdim)


def _two_stage(ctx, split: _Split, source: LazyTensor, kind: str, dtype, acc_dtype) -> LazyTensor:
    """``kind`` over chunks into partials (accumulator dtype), then over the partials: kept shape."""
    last = len(split.outer) + 1
    partial = ctx.reduction(split.chunks(source, kind), [last], False, kind, acc_dtype, acc_dtype, split=False)
    return ctx.reduction(split.partials_by_row(partial), [len(split.kept_shape)], False, kind, dtype, acc_dtype,
                         split=False)


def _split_arg(ctx, split: _Split, kind: ReductionKind, keepdim: bool) -> LazyTensor:
    from .ops_index import gather_load

    # the chunks' extreme values: the kind that combines as this one does, without the index
    extreme = next(k.name for k in REDUCTIONS.values() if k.combine == kind.combine and k.finalize == "value")
    source, last = split.t, len(split.outer) + 1   # the chunk dim C is last either way
    chunks = split.chunks(source, kind.name)
    best = ctx.reduction(chunks, [last], False, extreme, source.dtype, split=False)
    where = ctx.reduction(chunks, [last], False, kind.name, torch.int64, source.dtype, split=False)
    which = ctx.reduction(split.partials_by_row(best), [len(split.kept_shape)], False, kind.name, torch.int64,
                          source.dtype, split=False)

    def load(idx):
        chunk = which.load(idx)
        position = gather_load(ctx, where, split.partial_index([idx[d] for d in split.outer], chunk))
        start = Op("mul", [chunk, Constant(split.chunk, torch.int64)], torch.int64)
        return Op("add", [start, position], torch.int64)
    return split.finish(ctx, LazyTensor(split.kept_shape, torch.int64, source.device, loader=load), keepdim)


def _split_var(ctx, split: _Split, dtype, acc_dtype, correction: float, keepdim: bool) -> LazyTensor:
    source = split.t
    n = Constant(float(split.rnumel), acc_dtype)
    total = _two_stage(ctx, split, source, "sum", acc_dtype, acc_dtype)

    def deviation(idx):
        mean = Op("truediv", [split.row_value(total, idx), n], acc_dtype)
        d = Op("sub", [cast(source.load(idx), acc_dtype), mean], acc_dtype)
        return Op("mul", [d, d], acc_dtype)
    squares = LazyTensor(source.shape, acc_dtype, source.device, loader=deviation)
    squares.origins = source.origins
    m2 = _two_stage(ctx, split, squares, "sum", acc_dtype, acc_dtype)
    denominator = Constant(max(float(split.rnumel - correction), 0.0), acc_dtype)

    def load(idx):
        return cast(Op("truediv", [m2.load(idx), denominator], acc_dtype), dtype)
    return split.finish(ctx, LazyTensor(split.kept_shape, dtype, source.device, loader=load), keepdim)
