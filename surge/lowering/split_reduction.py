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
- var: when the chunks divide the row, one pass over the data: each chunk's sum and
  variance (Welford, in the first kernel), merged exactly in the second (Chan's
  formula, made of sums); else two passes, both split: the mean, then the sum of
  squared deviations from it.

A row that the chunks do not divide evenly is padded by masked lanes that hold
the reduction's neutral element. A value reduced twice alike (a batch norm's sum,
and the mean inside its variance) is split and reduced once.

On a GPU (``target.splits_column_reductions``) the rule is about programs. A row
reduction runs one program per row, so a large reduction over few rows splits even
when its rows are shorter than the threshold (an NCHW batch norm's 64 channels of
16 * 56 * 56 pixels), unless a row fits one persistent tile (the config's
``persistent_reduction_limit``), where the epilogue works on the row in registers.
A *column* reduction, one whose loads run along the results in memory (``x.sum(0)`` of a contiguous matrix; a channels-last (N, C, H, W) tensor
reduced over N, H and W), is read in tiles of ``COLUMN_TILE`` neighbouring columns, so
4096 columns make only 64 programs, and 64 channels one. It is split with the chunk
index outermost (partials laid out [S, columns]), so that both kernels still read along
the columns. Which reductions are column reductions is read from the loads of the value
being reduced (``reads_along_kept_dims``), as the kernel will read them.
"""
from __future__ import annotations

import math

import sympy
import torch

from .ir import Layout
from .reductions import REDUCTIONS, ReductionKind, reduction_kind
from .sizes import decompose, index_symbol, linear_coefficient, product, simplify_with_ranges
from .tensor import LazyTensor
from .values import Constant, IndexValue, Load, Masked, Op, cast, walk

# Split a reduction of at least this many elements per row (the config's threshold) ...
SPLIT_REDUCTION_MIN_ELEMENTS = 65536
# ... into chunks so that all rows together make about this many programs ...
TARGET_PROGRAMS = 1024
# ... each chunk holding at least threshold / CHUNK_DIVISOR elements. On a target that fills
# GPU programs, few rows of fewer elements split too when all rows together hold
# CHUNK_DIVISOR times the threshold (a batch norm's 64 channels of 16 * 56 * 56 pixels).
CHUNK_DIVISOR = 16
# Neighbouring columns one GPU program of a column reduction reads (Triton's column tiles);
# each program of a split's first stage reads at least threshold / CHUNK_DIVISOR elements.
COLUMN_TILE = 64


def plan_split(rows: int, rnumel: int, threshold: int, fills_programs: bool = False):
    """(chunks, chunk size) of a reduction over ``rows`` rows of ``rnumel`` elements read along
    the rows, or None when it has rows enough or is small. A GPU kernel runs one program per
    row (``fills_programs``): a large reduction over few rows splits even with short rows."""
    if rows >= TARGET_PROGRAMS // 2:
        return None
    long_rows = rnumel >= threshold
    large = fills_programs and rows * rnumel >= threshold * CHUNK_DIVISOR
    if not (long_rows or large):
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
    """Whether reductions are split to fill GPU programs (column tiles, few long rows); C++
    kernels parallelize over rows and column blocks instead."""
    return target.splits_column_reductions


def reads_along_kept_dims(t: LazyTensor, dims) -> bool:
    """Whether reducing ``t`` over ``dims`` reads memory along the results: the loads have
    stride 1 along the innermost kept dim and not along a reduced one. A kernel then reads
    neighbouring results' elements together (a column reduction, ``x.sum(0)`` of a
    contiguous matrix), whatever the logical order: a channels-last (N, C, H, W) tensor
    reduced over N, H and W is one, the same reduction over a contiguous one is not."""
    kept = [d for d in range(t.ndim) if d not in dims and t.shape[d] != 1]
    reduced = [d for d in dims if t.shape[d] != 1]
    if not kept or not reduced:
        return False
    symbols = [index_symbol("i", k) for k in range(t.ndim)]
    bounds = dict(zip(symbols, t.shape))
    along = across = 0
    for value in walk(t.load(symbols)):
        if not isinstance(value, Load) or value.indirect:
            continue
        index = simplify_with_ranges(value.index, bounds)
        if not (any(symbols[d] in index.free_symbols for d in reduced)
                and any(symbols[d] in index.free_symbols for d in kept)):
            continue   # per result (a weight) or per reduced row (a row's mean): a broadcast
        inner = linear_coefficient(index, symbols[kept[-1]])
        strides = [linear_coefficient(index, symbols[d]) for d in reduced]
        if inner == 1 and all(c is not None and c != 1 for c in strides):
            along += 1
        else:
            across += 1
    return along > 0 and along >= across


def plan_column_split(columns: int, rnumel: int, threshold: int = SPLIT_REDUCTION_MIN_ELEMENTS):
    """(chunks, chunk size) for a GPU column reduction with too few column tiles, or None.

    A column program loops over its rows, one short step of ``COLUMN_TILE`` columns at a
    time, so both stages take as many steps as they read rows per column: about
    sqrt(rnumel) chunks balance them (a batch norm's 64 channels of 50176 pixels: 224 chunks
    of 224 rows), as long as the column tiles times the chunks stay within
    ``TARGET_PROGRAMS`` and a chunk holds ``threshold / CHUNK_DIVISOR`` elements."""
    tiles = -(-columns // COLUMN_TILE)
    if tiles >= TARGET_PROGRAMS // 2:
        return None
    min_chunk = max(-(-threshold // (CHUNK_DIVISOR * min(columns, COLUMN_TILE))), 2)
    splits = min(TARGET_PROGRAMS // tiles, math.isqrt(rnumel - 1) + 1, rnumel // min_chunk)
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

    def key(self) -> tuple:
        """What makes two splits of one value the same split."""
        return tuple(self.dims), self.splits, self.chunk, self.chunks_first

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
    columns = splits_columns(ctx.target) and reads_along_kept_dims(t, dims)
    if columns:
        plan = plan_column_split(rows, rnumel, threshold)
    else:
        # a row that one tile holds runs persistent, its epilogue fused on the row in registers
        # (a LayerNorm): split, it would be read again by the epilogue's own kernel
        looped = rnumel > ctx.config.persistent_reduction_limit
        plan = plan_split(rows, rnumel, threshold, splits_columns(ctx.target) and looped)
    if plan is None:
        return None
    split = _Split(t, list(dims), rnumel, *plan, chunks_first=columns)
    kind = reduction_kind(reduction_type)
    if kind.split == "arg":
        return _split_arg(ctx, split, kind, keepdim)
    if kind.split == "two_pass":
        if split.splits * split.chunk == split.rnumel:   # every chunk full: merge its moments
            return _split_moments(ctx, split, dtype, acc_dtype, correction, keepdim)
        return _split_var(ctx, split, dtype, acc_dtype, correction, keepdim)
    assert kind.split == "same", kind
    return split.finish(ctx, _two_stage(ctx, split, t, reduction_type, dtype, acc_dtype), keepdim)


def _two_stage(ctx, split: _Split, source: LazyTensor, kind: str, dtype, acc_dtype) -> LazyTensor:
    """``kind`` over chunks into partials (accumulator dtype), then over the partials: kept shape."""
    def build():
        partials = split.partials_by_row(_partials(ctx, split, source, kind, acc_dtype))
        return ctx.reduction(partials, [len(split.kept_shape)], False, kind, dtype, acc_dtype, split=False)
    return _reused(ctx, ("total", split.key(), kind, dtype, acc_dtype), source, build)


def _partials(ctx, split: _Split, source: LazyTensor, kind: str, acc_dtype) -> LazyTensor:
    """``kind`` over each chunk of ``source``: the partials, [outer..., S] or [S, outer...]."""
    def build():
        return ctx.reduction(split.chunks(source, kind), [len(split.outer) + 1], False, kind, acc_dtype,
                             acc_dtype, split=False)
    return _reused(ctx, ("partials", split.key(), kind, acc_dtype), source, build)


def _reused(ctx, key: tuple, source: LazyTensor, build) -> LazyTensor:
    """``build()``, or what it gave for the same ``key`` and the same ``source`` value before."""
    key = (id(source),) + key
    found = ctx.split_results.get(key)
    if found is not None and found[0] is source:
        return found[1]
    result = build()
    ctx.split_results[key] = (source, result)
    return result


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
        position = gather_load(ctx, where, split.partial_index([idx[d] for d in split.outer], chunk), None)
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


def _split_moments(ctx, split: _Split, dtype, acc_dtype, correction: float, keepdim: bool) -> LazyTensor:
    """var in one pass over the data: each chunk's sum and squared deviations from its own
    mean (Welford, in the chunk's kernel), then the chunks merged exactly (Chan et al.):
    M2 = sum(m2_i + C * (mean_i - mean)**2). Needs full chunks (C elements each)."""
    source = split.t
    sums_by_row = split.partials_by_row(_partials(ctx, split, source, "sum", acc_dtype))
    variances_by_row = split.partials_by_row(_partials(ctx, split, source, "var", acc_dtype))
    total = _two_stage(ctx, split, source, "sum", acc_dtype, acc_dtype)
    row = len(split.kept_shape)
    c, n = Constant(float(split.chunk), acc_dtype), Constant(float(split.rnumel), acc_dtype)

    def merged(idx):
        mean = Op("truediv", [total.load(idx[:-1]), n], acc_dtype)
        d = Op("sub", [Op("truediv", [sums_by_row.load(idx), c], acc_dtype), mean], acc_dtype)
        between = Op("mul", [c, Op("mul", [d, d], acc_dtype)], acc_dtype)
        return Op("add", [Op("mul", [variances_by_row.load(idx), c], acc_dtype), between], acc_dtype)
    m2 = ctx.reduction(LazyTensor(sums_by_row.shape, acc_dtype, source.device, loader=merged), [row], False,
                       "sum", acc_dtype, acc_dtype, split=False)
    denominator = Constant(max(float(split.rnumel - correction), 0.0), acc_dtype)

    def load(idx):
        return cast(Op("truediv", [m2.load(idx), denominator], acc_dtype), dtype)
    return split.finish(ctx, LazyTensor(split.kept_shape, dtype, source.device, loader=load), keepdim)
