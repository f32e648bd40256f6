"""Generate one Triton kernel from a ``KernelPlan``.

Pointwise kernels run over a flat block of ``XBLOCK`` elements. Reduction
kernels run over ``[XBLOCK, RBLOCK]`` tiles: x rows per program, r along a row;
*persistent* when a whole row fits in one tile (every pass over r shares the
loads), *looped* otherwise (one ``for`` over r per pass: pass k computes the
reductions that need pass k-1's results; a last pass writes the row outputs).
A *column* reduction (its loads run along x in memory, as ``x.sum(0)``) loops over
r in short steps with wide tiles of neighbouring x (``autotune.column_default``):
a persistent tile holding a whole column would read one element per memory
transaction.
Values are computed in fp32 for fp16/bf16 buffers; loads and stores are
masked at the edges (a load whose address has no x, such as a weight row, only at
r's; reductions only at r's, since they never mix rows); indices are 64-bit when a
buffer needs it. ``bench/triton_sass.py`` counts what this costs per element on sm_90.
"""
from __future__ import annotations

import dataclasses
import re

import sympy
import torch

from ...lowering.reductions import HIGHEST, ONE, ZERO, ReductionKind, reduction_kind
from ...lowering.size_vars import SizeVars, static_int
from ...lowering.sizes import linear_coefficient
from ...lowering.values import Constant, IndexCheck, IndexValue, Load, Masked, Op, cast_scalar, walk
from ...options import CompileConfig
from ...target import Target
from ..common import KernelPlan, format_index, layout_span, plan_size_symbols
from .functions import functions_called
from .ops import COSTLY_OPS, OP_RULES, POINTER_TYPES, cast_expr, compute_dtype, literal, triton_dtype

INT32_LIMIT = 2**31 - 1
# The most elements one Triton block holds (TRITON_MAX_TENSOR_NUMEL).
TRITON_MAX_BLOCK = 2**20
# Column reductions with up to this many elements per column keep the whole column in
# one tile (the second stage of a split column reduction); longer ones loop over r.
COLUMN_PERSISTENT_LIMIT = 64

@dataclasses.dataclass
class Emitted:
    name: str
    dtype: torch.dtype     # logical dtype
    uses_r: bool
    scalar: bool           # a compile-time literal, not a block


@dataclasses.dataclass
class KernelSource:
    name: str
    source: str                 # the @triton.jit function
    helpers: list               # device functions it calls (``functions.FUNCTIONS``)
    params: list                # (param name, buffer name or None, signature type)
    is_reduction: bool
    persistent: bool
    xnumel: object              # an int; for symbolic sizes the expression's Python text
    rnumel: object
    index_bits: int
    costly_ops: int = 0         # transcendental ops per element (launch configs weigh compute)
    column: bool = False        # a reduction whose loads run along x (launch configs tile x wide)
    # symbolic sizes: what the host code passes after the pointers (the size symbols the
    # kernel reads, then xnumel and rnumel) as Python expressions; empty for static sizes,
    # whose launchers bind the numbers
    size_args: list = dataclasses.field(default_factory=list)
    size_hints: list = dataclasses.field(default_factory=list)   # the size arguments at the example inputs
    index_checks: bool = False  # asserts its index values are in range: compiled with debug=True


class Scope:
    """Lines of one block of code; ``parent`` is the block around a loop over r."""

    def __init__(self, parent: "Scope | None" = None):
        self.parent = parent
        self.lines: list[str] = []
        self.memo: dict = {}


class TritonKernelWriter:
    def __init__(self, plan: KernelPlan, buffers: dict, name: str, target: Target, config: CompileConfig,
                 sizes: SizeVars):
        self.plan = plan
        self.interpreted = target.interpreted   # bf16 rounds by hand: the interpreter truncates
        self.buffers = buffers
        self.name = name
        self.sizes = sizes
        self.xnumel = sizes.simplify(plan.xnumel)
        self.rnumel = sizes.simplify(plan.rnumel) if plan.is_reduction else sympy.Integer(1)
        self.symbolic = bool(self.xnumel.free_symbols or self.rnumel.free_symbols or plan_size_symbols(plan))
        self.reduction = plan.is_reduction
        self.column = self.reduction and reads_along_x(plan)
        persistent_limit = config.persistent_reduction_limit
        limit = min(COLUMN_PERSISTENT_LIMIT, persistent_limit) if self.column else persistent_limit
        tile_limit = 1 << max(0, limit.bit_length() - 1)   # the largest power of 2 within it
        # A symbolic row length decides at its hint: a persistent kernel's RBLOCK is chosen
        # at launch from the row's real length (launcher.py), right for any row that fits
        # one Triton block (guarded); a longer row than the hint's only runs slower.
        self.persistent = self.reduction and sizes.size_hint(self.rnumel) <= tile_limit and (
            sizes.is_static(self.rnumel) or sizes.guard_leq(self.rnumel, TRITON_MAX_BLOCK))
        # a tile of exactly one row needs no r mask: only a row of one known power-of-2 length
        static_rows = sizes.static(self.rnumel)
        self.whole_rows = self.persistent and static_rows == next_power_of_2(sizes.size_hint(self.rnumel))
        self.index_bits = 64 if self._needs_int64() else 32
        self.params: list = []
        self.pointer_of: dict[str, str] = {}
        self.reduced: dict[str, Emitted] = {}
        self.r_dependence: dict[int, bool] = {}
        self.counter = 0
        self.accumulators = 0   # looped reductions' accumulators, numbered
        self.costly_ops = 0
        self.index_checks = False   # the kernel asserts index values (``index_check``)
        self.body: list[str] = []

    def _needs_int64(self) -> bool:
        """64-bit indices when an index can pass int32's range; for symbolic sizes, decided
        at the hints and guarded (a larger size than the guard allows compiles again)."""
        extents = [self.xnumel * self.rnumel]
        for m in self.plan.members:
            extents.append(_extent(self.buffers[m.buffer.name]))
            for v in _walk_loads(m.value):
                if v.buffer in self.buffers and self.plan.member(v.buffer) is None:
                    extents.append(_extent(self.buffers[v.buffer]))
        static = [self.sizes.static(e) for e in extents]
        if any(n is not None and n > INT32_LIMIT for n in static):
            return True
        return not all(self.sizes.guard_leq(e, INT32_LIMIT) for e, n in zip(extents, static) if n is None)

    # -- names -----------------------------------------------------------------
    def tmp(self) -> str:
        self.counter += 1
        return f"tmp{self.counter - 1}"

    def pointer(self, buffer: str, out: bool) -> str:
        if buffer not in self.pointer_of:
            device = self.plan.members[0].buffer.device
            if self.buffers[buffer].device != device:   # lowering sends such reads to extern ops
                raise NotImplementedError(f"kernel {self.name} on {device} would read {buffer}, "
                                          f"a tensor on {self.buffers[buffer].device}")
            kind = "out_ptr" if out else "in_ptr"
            name = f"{kind}{sum(1 for p in self.params if p[0].startswith(kind))}"
            self.pointer_of[buffer] = name
            self.params.append((name, buffer, POINTER_TYPES[self.buffers[buffer].dtype]))
        return self.pointer_of[buffer]

    # -- block shapes ------------------------------------------------------------
    def full_shape(self, with_r: bool) -> str:
        if not self.reduction:
            return "[XBLOCK]"
        return "[XBLOCK, RBLOCK]" if with_r else "[XBLOCK, 1]"

    def mask(self, uses_r: bool, extra=(), uses_x: bool = True) -> str | None:
        """The lanes an access may touch; ``uses_x=False`` for a load whose address does not
        depend on x (a weight row): any row may read it, so only r's edge applies."""
        parts = ["xmask"] if uses_x else []
        if uses_r and (uses_x or not self.whole_rows):
            parts.append("rmask")
        mask = " & ".join(parts + list(extra)) or None
        if extra and parts and self.interpreted:
            # the interpreter makes a block & a scalar condition an int block, which a load
            # or store refuses as its mask; compared with 0 it is a bool block again
            mask = f"({mask}) != 0"
        return mask

    # -- values ----------------------------------------------------------------
    def emit(self, scope: Scope, value, masks=()) -> Emitted:
        if scope.parent is not None and not self.varies_along_r(value):
            scope = scope.parent   # hoisted out of the loop over r: computed once per row
        key = (id(value), masks)
        found = scope.memo.get(key)
        if found is not None:
            return found
        out = self._emit(scope, value, masks)
        scope.memo[key] = out
        return out

    def assign(self, scope: Scope, expr: str) -> str:
        """A temporary holding ``expr``; the same text in one scope is computed once."""
        found = scope.memo.get(expr)
        if found is not None:
            return found
        name = self.tmp()
        scope.lines.append(f"{name} = {expr}")
        scope.memo[expr] = name
        return name

    def varies_along_r(self, value) -> bool:
        found = self.r_dependence.get(id(value))
        if found is None:
            if isinstance(value, Load) and self.plan.member(value.buffer) is not None:
                member = self.plan.member(value.buffer)
                found = member.role == "xr" or (member.role == "x" and self.varies_along_r(member.value))
            elif isinstance(value, Load):
                found = any(s.name[0] == "r" for s in value.index.free_symbols)
            elif isinstance(value, IndexValue):
                found = any(s.name[0] == "r" for s in value.expr.free_symbols)
            else:
                found = False
            found = found or any(self.varies_along_r(c) for c in value.children)
            self.r_dependence[id(value)] = found
        return found

    def _emit(self, scope, v, masks) -> Emitted:
        if isinstance(v, Constant):
            return Emitted(literal(v.value, v.dtype), v.dtype, False, True)
        if isinstance(v, IndexValue):
            uses_r = any(s.name.startswith("r") for s in v.expr.free_symbols)
            if not v.expr.free_symbols:
                return Emitted(format_index(v.expr), v.dtype, False, True)
            text = format_index(v.expr)
            if v.dtype != torch.int64 or self.index_bits == 32:
                text = f"({text}).to({triton_dtype(compute_dtype(v.dtype))})"
            return Emitted(self.assign(scope, text), v.dtype, uses_r, False)
        if isinstance(v, Load):
            return self._emit_load(scope, v, masks)
        if isinstance(v, Op):
            args = [self.emit(scope, c, masks) for c in v.children]
            uses_r = any(a.uses_r for a in args)
            scalar = all(a.scalar for a in args)
            if v.op == "cast":
                folded = _constant_of(v.children[0])
                if folded is not None:   # a literal has no .to(): the converted literal instead
                    value = cast_scalar(folded, v.children[0].dtype, v.dtype)
                    return Emitted(literal(value, v.dtype), v.dtype, False, True)
                source = args[0].name
                if args[0].scalar:   # an expression of literals: a 0-d tensor has .to()
                    source = self.assign(scope, f"tl.full([], {source}, "
                                                f"{triton_dtype(compute_dtype(args[0].dtype))})")
                expr = cast_expr(source, args[0].dtype, v.dtype)
                if v.dtype == torch.bfloat16 and self.interpreted:
                    expr = f"_to_bf16_rtne({source}).to(tl.float32)"
                return Emitted(self.assign(scope, expr), v.dtype, uses_r, False)
            else:
                expr = OP_RULES[v.op](*[a.name for a in args],
                                      dtype=v.children[0].dtype if v.op != "where" else v.dtype)
            if scalar:
                return Emitted(expr, v.dtype, False, True)
            self.costly_ops += v.op in COSTLY_OPS
            return Emitted(self.assign(scope, expr), v.dtype, uses_r, False)
        if isinstance(v, Masked):
            cond = self.emit(scope, v.mask, masks)
            body = self.emit(scope, v.body, masks + (cond.name,))
            other = literal(v.other, v.dtype)
            expr = f"tl.where({cond.name}, {body.name}, {other})"
            return Emitted(self.assign(scope, expr), v.dtype, cond.uses_r or body.uses_r, False)
        if isinstance(v, IndexCheck):
            return self.index_check(scope, v, masks)
        raise NotImplementedError(f"no Triton code for {type(v).__name__}")

    def index_check(self, scope, v: IndexCheck, masks) -> Emitted:
        """The index value if it is in range, else 0 (an address inside the tensor), and a
        device assert on the lanes the access touches, as eager's CUDA kernels assert: the
        error surfaces at the next synchronization; the interpreter raises it at once."""
        index, size = self.emit(scope, v.index, masks), self.emit(scope, v.size, masks)
        ok = self.assign(scope, f"({index.name} >= 0) & ({index.name} < {size.name})")
        lanes = self.mask(index.uses_r, masks)
        kind, message = v.error
        scope.lines.append(f"tl.device_assert({ok} | ~({lanes}), {kind + ': ' + message!r})" if lanes
                           else f"tl.device_assert({ok}, {kind + ': ' + message!r})")
        self.index_checks = True
        return Emitted(self.assign(scope, f"tl.where({ok}, {index.name}, 0)"), torch.int64, index.uses_r, False)

    def _emit_load(self, scope, v: Load, masks) -> Emitted:
        member = self.plan.member(v.buffer)
        if member is not None:
            if member.role == "reduction":
                return self.reduced[v.buffer]
            return self.emit(scope, member.value, masks)
        names, uses_r = {}, any(s.name.startswith("r") for s in v.index.free_symbols)
        for (symbol, _), child in zip(v.indirect, v.children):
            idx = self.emit(scope, child, masks)
            names[symbol] = idx.name
            uses_r = uses_r or idx.uses_r
        pointer = self.pointer(v.buffer, out=False)
        if not v.index.free_symbols:   # one element for the whole block: no mask needed
            expr = f"tl.load({pointer} + {format_index(v.index)})"
        else:
            uses_x = bool(v.indirect) or any(s.name[0] == "x" for s in v.index.free_symbols)
            mask = self.mask(uses_r, masks, uses_x)
            offset = format_index(v.index, names)
            if not any(s.name[0] in "xr" for s in v.index.free_symbols):
                offset += " + tl.zeros_like(xindex)"   # a gather through scalars: block-shaped pointer
            expr = f"tl.load({pointer} + {offset}, {mask}, other=0)" if mask else f"tl.load({pointer} + {offset})"
        if v.dtype == torch.bfloat16 and any(s.name[0] == "x" for s in v.index.free_symbols):
            expr = f"_bf16_to_f32({expr})"
        elif v.dtype in (torch.float16, torch.bfloat16):
            expr += ".to(tl.float32)"
        return Emitted(self.assign(scope, expr), v.dtype, uses_r, False)

    def block(self, e: Emitted, dtype: torch.dtype, with_r: bool) -> str:
        """``e`` as a full block (literals and x-only values broadcast)."""
        if e.scalar:
            return f"tl.full({self.full_shape(with_r)}, {e.name}, {triton_dtype(compute_dtype(dtype))})"
        if with_r and not e.uses_r:
            return f"tl.broadcast_to({e.name}, {self.full_shape(True)})"
        return e.name

    # -- stores ----------------------------------------------------------------
    def store(self, scope: Scope, member) -> None:
        buf = self.buffers[member.buffer.name]
        with_r = member.role == "xr"
        if member.role == "reduction":
            e = self.reduced[member.buffer.name]
        else:
            e = self.emit(scope, member.value)
        value = self.block(e, e.dtype, with_r)
        if buf.dtype == torch.bfloat16 and self.interpreted:
            value = f"_to_bf16_rtne({value})"
        elif buf.dtype != compute_dtype(buf.dtype) or buf.dtype != e.dtype:
            value = f"{value}.to({triton_dtype(buf.dtype)})"
        pointer = self.pointer(member.buffer.name, out=True)
        # a scatter's index values, and where they are in range (the mask of its value)
        names = {symbol: self.emit(scope, v).name for symbol, v in member.indirect}
        extra = (self.emit(scope, member.value.mask).name,) if member.indirect else ()
        index = format_index(member.store_index, names)
        if not any(s.name[0] in "xr" for s in member.store_index.free_symbols):   # a block-shaped pointer
            index += " + tl.zeros_like(xindex)"
        scope.lines.append(f"tl.store({pointer} + {index}, {value}, {self.mask(with_r, extra)})")

    # -- reductions: the table of lowering/reductions.py, one rule per combine and finalize --
    def neutral(self, kind: ReductionKind, dtype: torch.dtype) -> str:
        if kind.identity in (ZERO, ONE):
            return "0" if kind.identity == ZERO else "1"
        largest = kind.identity == HIGHEST
        if dtype.is_floating_point:
            return 'float("inf")' if largest else 'float("-inf")'
        if dtype == torch.bool:
            return "1" if largest else "0"
        info = torch.iinfo(dtype)
        return str(info.max if largest else info.min)

    def reduced_lanes(self) -> str | None:
        """The mask of the lanes a reduction takes: r's edge only (a reduction never mixes
        rows, and rows past xnumel are never stored), None when a tile is whole rows."""
        return None if self.whole_rows else "rmask"

    @staticmethod
    def accumulated(member, kind: ReductionKind) -> torch.dtype:
        """The dtype of the elements a reduction accumulates."""
        return member.value.dtype if kind.compares_inputs else member.buffer.acc_dtype

    def row_combine(self, kind: ReductionKind, value: str, dtype: torch.dtype) -> str:
        """The combine of a tile's lanes along r, per row (``[XBLOCK, 1]``)."""
        combine = kind.combine
        if combine == "add":
            expr = f"tl.sum({value}, 1)[:, None]"
        elif combine == "mul":
            expr = f"tl.reduce({value}, 1, _prod_combine)[:, None]"
        elif combine in ("max", "min") and kind.nan == "propagate" and dtype.is_floating_point:
            expr = f"tl.reduce({value}, 1, _{combine}_propagating_nan)[:, None]"   # tl.max drops NaN
        elif combine in ("max", "min", "or", "and"):
            expr = f"tl.{'max' if combine in ('max', 'or') else 'min'}({value}, 1)[:, None]"
        else:
            raise NotImplementedError(f"no Triton rule for the combine {combine!r} ({kind.name})")
        return expr + " != 0" if kind.finalize == "nonzero" else expr

    def reduction_input(self, scope: Scope, member, kind: ReductionKind) -> str:
        e = self.emit(scope, member.value)
        body = self.block(e, self.accumulated(member, kind), True)
        return f"{body}.to(tl.int8)" if kind.finalize == "nonzero" else body

    def reduce_persistent(self, scope: Scope, member) -> None:
        buf = member.buffer
        kind = reduction_kind(buf.reduction_type)
        acc = self.accumulated(member, kind)
        body = self.reduction_input(scope, member, kind)
        lanes = self.reduced_lanes()
        masked = body
        if lanes is not None:
            masked = self.assign(scope, f"tl.where({lanes}, {body}, {self.neutral(kind, acc)})")
        if kind.tracks_index and kind.nan == "extreme" and acc.is_floating_point:   # NaN wins, as in eager
            pair = self.tmp()
            lanes_index = "rindex + tl.zeros([XBLOCK, RBLOCK], tl.int32)"
            scope.lines.append(f"_, {pair} = tl.reduce(({masked}, {lanes_index}), 1, _arg{kind.combine}_combine)")
            expr = f"{pair}[:, None].to(tl.int64)"
        elif kind.tracks_index:
            expr = f"tl.arg{kind.combine}({masked}, 1)[:, None].to(tl.int64)"
        elif kind.combine == "moments":   # two passes over the tile: the mean, the squared deviations
            mean = self.assign(scope, f"tl.sum({masked}, 1)[:, None] / {self.row_length()}")
            dev = f"{body} - {mean}" if lanes is None else f"tl.where({lanes}, {body} - {mean}, 0.0)"
            dev = self.assign(scope, dev)
            expr = f"tl.sum({dev} * {dev}, 1)[:, None] / {self.row_length(buf.correction)}"
        else:
            expr = self.row_combine(kind, masked, acc)
        self.reduced[buf.name] = Emitted(self.assign(scope, expr), kind.result_dtype(buf.acc_dtype), False, False)

    def reduce_looped_init(self, outer: Scope, member) -> list:
        kind = reduction_kind(member.buffer.reduction_type)
        acc = self.accumulated(member, kind)
        t = triton_dtype(compute_dtype(acc)) if kind.finalize != "nonzero" else "tl.int8"
        shape = "[XBLOCK, RBLOCK]"
        # named by position, not by buffer: the same reduction in another layer of the
        # model is then the same kernel text, one compile (kernel_files)
        k = self.accumulators
        self.accumulators += 1
        names = [f"acc{k}"]
        if kind.combine == "moments":   # Welford's running mean, M2 and count per lane
            names = [f"mean{k}", f"m2_{k}", f"weight{k}"]
            for n in names:
                outer.lines.append(f"{n} = tl.zeros({shape}, tl.float32)")
        elif kind.tracks_index:
            names = [f"acc{k}", f"idx{k}"]
            outer.lines.append(f"{names[0]} = tl.full({shape}, {self.neutral(kind, acc)}, {t})")
            outer.lines.append(f"{names[1]} = tl.zeros({shape}, tl.int64)")
        else:
            outer.lines.append(f"{names[0]} = tl.full({shape}, {self.neutral(kind, acc)}, {t})")
        return names

    def reduce_looped_update(self, scope: Scope, member, accs) -> None:
        kind = reduction_kind(member.buffer.reduction_type)
        combine, acc = kind.combine, self.accumulated(member, kind)
        body = self.reduction_input(scope, member, kind)
        lanes = self.reduced_lanes()
        a = accs[0]
        if kind.tracks_index:
            cmp = ">" if combine == "max" else "<"
            wins = f"({body} {cmp} {a})"
            if kind.nan == "extreme" and acc.is_floating_point:   # the first NaN wins
                wins += f" | (({body} != {body}) & ({a} == {a}))"
            take = self.assign(scope, f"({lanes}) & ({wins})")
            scope.lines.append(f"{a} = tl.where({take}, {body}, {a})")
            scope.lines.append(f"{accs[1]} = tl.where({take}, rindex + tl.zeros([XBLOCK, RBLOCK], tl.int64), {accs[1]})")
        elif combine == "add":
            scope.lines.append(f"{a} = {a} + tl.where({lanes}, {body}, 0)")
        elif combine == "mul":
            scope.lines.append(f"{a} = {a} * tl.where({lanes}, {body}, 1)")
        elif combine in ("max", "min", "or", "and"):
            fn = "tl.maximum" if combine in ("max", "or") else "tl.minimum"
            nan = ", propagate_nan=tl.PropagateNan.ALL" if kind.nan == "propagate" and acc.is_floating_point else ""
            scope.lines.append(f"{a} = {fn}({a}, tl.where({lanes}, {body}, {self.neutral(kind, acc)}){nan})")
        elif combine == "moments":
            mean, m2, weight = accs
            w = self.assign(scope, f"{weight} + tl.where({lanes}, 1.0, 0.0)")
            delta = self.assign(scope, f"tl.where({lanes}, {body} - {mean}, 0.0)")
            new_mean = self.assign(scope, f"{mean} + tl.where({lanes}, {delta} / tl.maximum({w}, 1.0), 0.0)")
            scope.lines.append(f"{m2} = {m2} + tl.where({lanes}, {delta} * ({body} - {new_mean}), 0.0)")
            scope.lines.append(f"{mean} = {new_mean}")
            scope.lines.append(f"{weight} = {w}")
        else:
            raise NotImplementedError(f"no Triton rule for the combine {combine!r} ({kind.name})")

    def reduce_looped_finish(self, outer: Scope, member, accs) -> None:
        buf = member.buffer
        kind = reduction_kind(buf.reduction_type)
        if kind.tracks_index:
            pair = self.tmp()
            outer.lines.append(f"_, {pair} = tl.reduce(({accs[0]}, {accs[1]}), 1, _arg{kind.combine}_combine)")
            expr = f"{pair}[:, None]"
        elif kind.combine == "moments":
            m2 = self.tmp()
            outer.lines.append(f"_, {m2}, _ = tl.reduce(({accs[0]}, {accs[1]}, {accs[2]}), 1, _welford_combine)")
            expr = f"{m2}[:, None] / {self.row_length(buf.correction)}"
        else:
            expr = self.row_combine(kind, accs[0], buf.acc_dtype)
        self.reduced[buf.name] = Emitted(self.assign(outer, expr), kind.result_dtype(buf.acc_dtype), False, False)

    def row_length(self, correction: float | None = None) -> str:
        """The row's length (less a variance's correction, as a float) in kernel code: a
        literal for a static size, else the ``rnumel`` argument."""
        static = self.sizes.static(self.rnumel)
        if correction is None:
            return str(static) if static is not None else "rnumel"
        return str(float(static - correction)) if static is not None else f"(rnumel - {float(correction)})"

    # -- the kernel ----------------------------------------------------------------
    def index_setup(self, scope: Scope, prefix: str, sizes) -> None:
        base = "xindex" if prefix == "x" else "rindex"
        stride = sympy.Integer(1)
        for k in reversed(range(len(sizes))):
            expr = base if stride == 1 else f"({base} // {_size_operand(stride)})"
            if k > 0:
                expr = f"{expr} % {_size_operand(sizes[k])}"
            scope.lines.append(f"{prefix}{k} = {expr}")
            stride = stride * sizes[k]

    def r_setup(self, scope: Scope, offset: str) -> None:
        scope.lines.append(f"rindex = {offset}rbase")
        if self.whole_rows:
            # the tile is exactly one row: a constant mask lets Triton drop it
            scope.lines.append("rmask = tl.full([1, RBLOCK], 1, tl.int1)")
        else:
            scope.lines.append("rmask = rindex < rnumel")
        self.index_setup(scope, "r", self.plan.r_sizes)

    def generate(self) -> KernelSource:
        top = Scope()
        int_t = "tl.int64" if self.index_bits == 64 else "tl.int32"
        pid = "tl.program_id(0)" + (".to(tl.int64)" if self.index_bits == 64 else "")
        top.lines.append(f"xoffset = {pid} * XBLOCK")
        if self.reduction:
            top.lines.append("xindex = xoffset + tl.arange(0, XBLOCK)[:, None]")
        else:
            top.lines.append("xindex = xoffset + tl.arange(0, XBLOCK)")
        top.lines.append("xmask = xindex < xnumel")
        self.index_setup(top, "x", self.plan.x_sizes)
        if not self.reduction:
            for m in self.plan.members:
                if m.stored:
                    self.store(top, m)
            return self.finish(top)
        rbase = "tl.arange(0, RBLOCK)[None, :]" + (f".to({int_t})" if self.index_bits == 64 else "")
        top.lines.append(f"rbase = {rbase}")
        if self.persistent:
            self.r_setup(top, "")
            for m in self.plan.members:
                if m.role == "reduction":
                    self.reduce_persistent(top, m)
            for m in self.plan.members:
                if m.stored:
                    self.store(top, m)
            return self.finish(top)
        for stage in range(self.plan.num_stages):
            members = [m for m in self.plan.members if m.role == "reduction" and m.stage == stage]
            accs = [self.reduce_looped_init(top, m) for m in members]
            loop = self.loop(top)
            for m, a in zip(members, accs):
                self.reduce_looped_update(loop, m, a)
            self.close_loop(top, loop)
            for m, a in zip(members, accs):
                self.reduce_looped_finish(top, m, a)
        row_stores = [m for m in self.plan.members if m.stored and m.role == "xr"]
        if row_stores:
            loop = self.loop(top)
            for m in row_stores:
                self.store(loop, m)
            self.close_loop(top, loop)
        for m in self.plan.members:
            if m.stored and m.role != "xr":
                self.store(top, m)
        return self.finish(top)

    def _unspecialized(self, read: list, sizes: list) -> list:
        """The size arguments Triton must not specialize on: Triton specializes an integer
        on being 1 or a multiple of 16 by its value at the launch, so a symbolic size whose
        value decides that per call would compile one binary per kind of size. A size that
        is a multiple of 16 for every size (``3072 * s0``) keeps the specialization: its
        value always gives the same one, and the masks it bounds stay vectorizable."""
        if not self.symbolic:
            return []
        exprs = list(read) + [self.xnumel] + ([self.rnumel] if self.reduction else [])
        return [name for name, e in zip(sizes, exprs) if not self.sizes.known_divisible(e, 16)]

    def loop(self, outer: Scope) -> Scope:
        inner = Scope(parent=outer)
        self.r_setup(inner, "roffset + ")
        return inner

    def close_loop(self, outer: Scope, inner: Scope) -> None:
        outer.lines.append("for roffset in range(0, rnumel, RBLOCK):")
        outer.lines.extend("    " + line for line in inner.lines)

    def finish(self, top: Scope) -> KernelSource:
        params = [p[0] for p in self.params]
        body = "\n".join(top.lines)   # the size symbols the code reads (xnumel may cover the others)
        read = [s for s in plan_size_symbols(self.plan) if re.search(rf"\b{s.name}\b", body)] if self.symbolic else []
        symbols = [s.name for s in read]
        sizes = symbols + ["xnumel"] + (["rnumel"] if self.reduction else [])
        consts = ["XBLOCK: tl.constexpr"] + (["RBLOCK: tl.constexpr"] if self.reduction else [])
        int_sig = "i64" if self.index_bits == 64 else "i32"
        all_params = list(self.params) + [(s, None, int_sig) for s in sizes]
        head = f"def {self.name}({', '.join(params + sizes + consts)}):"
        lines = [_decorator(self.index_checks, self._unspecialized(read, sizes)), head]
        lines += ["    " + line for line in top.lines]
        source = "\n".join(lines) + "\n"
        numels = [self.xnumel] + ([self.rnumel] if self.reduction else [])
        if self.symbolic:
            xnumel, rnumel = format_index(self.xnumel), format_index(self.rnumel)
            size_args = symbols + [format_index(n) for n in numels]
            hints = [self.sizes.hint(n) for n in read + numels]
        else:
            xnumel, rnumel = self.sizes.static(self.xnumel), self.sizes.static(self.rnumel)
            size_args, hints = [], []
        return KernelSource(self.name, source, functions_called(source), all_params,
                            self.reduction, self.persistent, xnumel, rnumel, self.index_bits,
                            self.costly_ops, self.column, size_args, hints, self.index_checks)


def _decorator(index_checks: bool, unspecialized: list) -> str:
    options = []
    if index_checks:   # device asserts run only in kernels compiled with debug=True
        options.append("debug=True")
    if unspecialized:
        options.append(f"do_not_specialize={unspecialized!r}")
    return f"@triton.jit({', '.join(options)})" if options else "@triton.jit"


def _constant_of(v):
    """The Python value of a compile-time constant (a constant, or an index that kernel
    symbols made constant), else None."""
    if isinstance(v, Constant):
        return v.value
    if isinstance(v, IndexValue) and not v.expr.free_symbols:
        return static_int(v.expr)
    return None


def _size_operand(n: sympy.Expr) -> str:
    """A size as the right operand of ``//`` or ``%`` (parenthesized unless one term)."""
    text = format_index(n)
    return text if n.is_Atom else f"({text})"


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _extent(buf) -> sympy.Expr:
    """Elements spanned by a buffer's layout (its largest reachable offset + 1)."""
    return buf.layout.offset + layout_span(buf.layout)


def reads_along_x(plan: KernelPlan) -> bool:
    """Whether a reduction kernel's loads that vary along both x and r are contiguous along x
    (the innermost x index has stride 1) and not along r: a column reduction."""
    if not plan.x_sizes or not plan.r_sizes:
        return False
    inner_x, r_names = f"x{len(plan.x_sizes) - 1}", [f"r{k}" for k in range(len(plan.r_sizes))]
    along_x = across = 0
    for m in plan.members:
        for load in _walk_loads(m.value):
            if plan.member(load.buffer) is not None or load.indirect:
                continue
            names = {s.name for s in load.index.free_symbols}
            if not any(n.startswith("r") for n in names) or not any(n.startswith("x") for n in names):
                continue
            x_stride = linear_coefficient(load.index, _symbol_named(load.index, inner_x))
            r_strides = [linear_coefficient(load.index, _symbol_named(load.index, r)) for r in r_names]
            if x_stride == 1 and all(c is not None and c != 1 for c in r_strides):
                along_x += 1
            else:
                across += 1
    return along_x > 0 and along_x >= across


def _symbol_named(expr, name: str):
    for s in expr.free_symbols:
        if s.name == name:
            return s
    return sympy.Symbol(name)


def _walk_loads(value):
    return [v for v in walk(value) if isinstance(v, Load)]


def generate_triton_kernel(plan: KernelPlan, buffers: dict, name: str, target: Target,
                           config: CompileConfig, sizes: SizeVars | None = None) -> KernelSource:
    return TritonKernelWriter(plan, buffers, name, target, config, sizes or SizeVars()).generate()
