"""Generate one C++ kernel function from a ``KernelPlan``.

Pointwise kernels are a loop nest over the x dims: the outer dims run in
parallel under OpenMP, the innermost is an ``omp simd`` loop the compiler
vectorizes. Reduction kernels run one x point (a row) per iteration of the
parallel loop; within a row, pass k over r computes the reductions of stage k
(those that need stage k-1's results) in one ``omp simd reduction`` loop, and a
last pass writes the row's x+r outputs. A kernel with a single row splits the
row itself across threads instead. Values that do not depend on r are hoisted
out of the r loops into the row.

Reductions: sum/prod/any/all are OpenMP reductions; max/min track NaN in a
flag so a NaN anywhere in the row gives NaN, as in eager; var is two passes
(the mean, then the sum of squared deviations) over a row that is still in
cache; argmax/argmin are a sequential scan (the first extremum wins, NaN is the
largest as in eager).
"""
from __future__ import annotations

import dataclasses
import re

import sympy
import torch

from ...lowering.reductions import HIGHEST, ONE, ZERO, ReductionKind, reduction_kind
from ...lowering.size_vars import SizeVars
from ...lowering.sizes import index_below, index_symbol
from ...lowering.values import Constant, IndexCheck, IndexValue, Load, Masked, Op, op_count
from ..common import KernelPlan, format_index, layout_span, plan_size_symbols
from .affine_index import affine_index, symbolic_affine_index
from .column_reduction import generate_columns, wants_columns
from .column_sums import ColumnSums
from .index_checks import IndexChecks
from .ops import OP_RULES, cast_expr, compute_dtype, ctype, literal, load_expr, storage_type, store_expr
from .narrow_loads import NarrowLoads
from .row_cache import RowCachePlanner
from .scope import Scope
from .thread_ranges import range_loop, rows_and_kernel
from .vector16 import BLOCK, LANES, VectorLoop

# The OpenMP reduction operator of each combine whose accumulator one operator updates
# (index-tracking kinds scan sequentially; moments sum in their first pass).
OPENMP_COMBINE = {"add": "+", "moments": "+", "mul": "*", "or": "|", "and": "&", "max": "max", "min": "min"}


def _identity(kind: ReductionKind, t: str, acc: torch.dtype) -> str:
    """The neutral element as a C++ expression of type ``t``."""
    if kind.identity in (ZERO, ONE):
        return "0" if kind.identity == ZERO else "1"
    if kind.identity == HIGHEST:
        return f"std::numeric_limits<{t}>::infinity()" if acc.is_floating_point else f"std::numeric_limits<{t}>::max()"
    return f"-std::numeric_limits<{t}>::infinity()" if acc.is_floating_point else f"std::numeric_limits<{t}>::lowest()"


# Below this many elements of work a kernel runs on one thread: waking the
# OpenMP team costs more than it saves.
PARALLEL_MIN_ELEMENTS = 32768


def c_index(expr: sympy.Expr, names: dict | None = None) -> str:
    """An index expression in C: ``format_index``'s syntax with C's integer division.

    Indices are non-negative, so C's truncating ``/`` and ``%`` equal the floor
    forms that ``format_index`` prints as ``//`` and ``%``.
    """
    return format_index(expr, names).replace(" // ", " / ")


@dataclasses.dataclass
class Emitted:
    name: str
    dtype: torch.dtype   # logical dtype


@dataclasses.dataclass
class CppKernel:
    name: str
    source: str
    params: list        # (buffer name, is output), in parameter order
    is_reduction: bool
    parallel: bool
    vector16: bool = False   # has explicit vector loops: the module needs vector16.HELPERS
    size_args: list = dataclasses.field(default_factory=list)   # size symbols, parameters after the pointers
    index_errors: dict = dataclasses.field(default_factory=dict)   # bit -> error: it returns those bits


class CppKernelWriter:
    def __init__(self, plan: KernelPlan, buffers: dict, name: str, shared: frozenset = frozenset(),
                 sizes: SizeVars | None = None):
        self.plan = plan
        self.buffers = buffers
        self.name = name
        self.shared = shared   # buffers whose storage another parameter also points into
        sizes = self.sizes = sizes or SizeVars()
        # Symbolic sizes (function parameters) take the plain loop forms, right for every
        # size: no vector16 blocks, interleaving, row caches, column tiles or affine
        # rewrites, which are planned from numbers.
        self.symbolic = bool(plan_size_symbols(plan)) or not all(
            sizes.is_static(n) for n in (plan.xnumel, plan.rnumel, *plan.x_sizes, *plan.r_sizes))
        number = sizes.simplify if self.symbolic else sizes.static
        self.xnumel = number(plan.xnumel)
        self.rnumel = number(plan.rnumel) if plan.is_reduction else number(1)
        self.x_sizes = [number(s) for s in plan.x_sizes]
        self.r_sizes = [number(s) for s in plan.r_sizes]
        self.loop_sizes = {f"x{k}": n for k, n in enumerate(self.x_sizes)}
        self.loop_sizes.update({f"r{k}": n for k, n in enumerate(self.r_sizes)})
        self._affine: dict = {}
        self.params: list = []
        self.pointer_of: dict[str, str] = {}
        self.reduced: dict[str, Emitted] = {}
        self.counter = 0
        self._r_dep: dict[int, bool] = {}
        self.row: Scope | None = None
        self.row_cache: dict[int, str] = {}     # id(value) -> its scratch array (see row_cache.py)
        self.row_cache_written: set = set()
        self.parallel = self.symbolic or self.xnumel * self.rnumel >= PARALLEL_MIN_ELEMENTS
        # symbolic sizes: the team wakes at run time only for enough work, through the rows
        # function (thread_ranges.py) or, for a single row split across threads, OpenMP's if clause
        self.work = c_size(self.xnumel * self.rnumel) if self.symbolic else ""
        self.parallel_if = f" if({self.work} >= {PARALLEL_MIN_ELEMENTS})" if self.symbolic else ""
        self.shared_extent: str | None = None   # the rows function's range, when the nest has one
        # "[xi]" when accumulators are per-column arrays (column_reduction.py), else ""
        self.lane = ""
        self.narrow: NarrowLoads | None = None   # bool loads staged per row (narrow_loads.py)
        self.index_checks = IndexChecks()
        # a pointwise nest's block before its innermost loop: index checks that do not vary
        # along that loop (an embedding's row) run there, once per row, not once per element
        self.x_outer: Scope | None = None
        self._inner_x_dep: dict[int, bool] = {}
        self.vector16 = False

    # -- names -----------------------------------------------------------------
    def tmp(self) -> str:
        self.counter += 1
        return f"t{self.counter - 1}"

    def pointer(self, buffer: str, out: bool) -> str:
        if buffer not in self.pointer_of:
            kind = "out" if out else "in"
            name = f"{kind}{sum(1 for _, o in self.params if o == out)}"
            self.pointer_of[buffer] = name
            self.params.append((buffer, out))
        return self.pointer_of[buffer]

    def index(self, expr: sympy.Expr, names: dict | None = None) -> str:
        """An index in C, with divisions that are affine on the loop domain removed (affine_index.py)."""
        return c_index(self.affine(expr), names)

    def affine(self, expr: sympy.Expr) -> sympy.Expr:
        """``expr`` without the divisions that are affine on the loop domain."""
        found = self._affine.get(expr)
        if found is None and self.symbolic:
            found = self._affine[expr] = symbolic_affine_index(expr, self.loop_sizes, self.sizes)
        if found is None:
            r_vars = [s for s in expr.free_symbols if s.name.startswith("r")]
            if r_vars:
                innermost = f"r{len(self.r_sizes) - 1}"
            else:
                innermost = f"x{len(self.x_sizes) - 1}" if self.x_sizes else None
            found = self._affine[expr] = affine_index(expr, self.loop_sizes, innermost)
        return found

    # -- r dependence (for hoisting) -------------------------------------------------
    def depends_on_r(self, v) -> bool:
        found = self._r_dep.get(id(v))
        if found is not None:
            return found
        if isinstance(v, Load):
            member = self.plan.member(v.buffer)
            if member is not None:
                result = member.role == "xr" or (member.role == "x" and self.depends_on_r(member.value))
            else:
                result = _has_r(v.index) or any(self.depends_on_r(c) for c in v.children)
        elif isinstance(v, IndexValue):
            result = _has_r(v.expr)
        else:
            result = any(self.depends_on_r(c) for c in v.children)
        self._r_dep[id(v)] = result
        return result

    def depends_on_inner_x(self, v) -> bool:
        """Whether ``v`` varies along a pointwise nest's innermost loop."""
        found = self._inner_x_dep.get(id(v))
        if found is not None:
            return found
        inner = index_symbol("x", len(self.x_sizes) - 1)
        if isinstance(v, Load):
            member = self.plan.member(v.buffer)
            result = (self.depends_on_inner_x(member.value) if member is not None else
                      inner in v.index.free_symbols or any(self.depends_on_inner_x(c) for c in v.children))
        elif isinstance(v, IndexValue):
            result = inner in v.expr.free_symbols
        else:
            result = any(self.depends_on_inner_x(c) for c in v.children)
        self._inner_x_dep[id(v)] = result
        return result

    def target_scope(self, scope: Scope, v) -> Scope:
        """Values that do not vary along r are computed once per row, before the r loops;
        index checks that do not vary along a pointwise nest's innermost loop, before it
        (an OR into the flag in that loop costs 30% on an embedding: bench/NOTES.md)."""
        if scope.kind == "rloop" and self.row is not None and not self.depends_on_r(v):
            return self.row
        if (scope.kind == "xloop" and self.x_outer is not None and isinstance(v, IndexCheck)
                and not self.depends_on_inner_x(v)):
            return self.x_outer
        return scope

    # -- values ----------------------------------------------------------------
    def emit(self, scope: Scope, v) -> Emitted:
        if isinstance(v, Constant):
            return Emitted(literal(v.value, v.dtype), v.dtype)
        scope = self.target_scope(scope, v)
        found = scope.lookup(id(v))
        if found is not None:
            return found
        cache = self.row_cache.get(id(v)) if scope.kind == "rloop" else None
        if cache is not None and id(v) in self.row_cache_written:
            out = Emitted(self.assign(scope, v.dtype, f"{cache}[{self.r_linear()}]"), v.dtype)
        else:
            out = self._emit(scope, v)
            if cache is not None:
                scope.lines.append(f"{cache}[{self.r_linear()}] = {out.name};")
                self.row_cache_written.add(id(v))
        scope.memo[id(v)] = out
        return out

    def assign(self, scope: Scope, dtype: torch.dtype, expr: str) -> str:
        name = self.tmp()
        scope.lines.append(f"{ctype(dtype)} {name} = {expr};")
        return name

    def _emit(self, scope: Scope, v) -> Emitted:
        if isinstance(v, IndexValue):
            return Emitted(self.assign(scope, v.dtype, f"static_cast<{ctype(v.dtype)}>({c_index(v.expr)})"), v.dtype)
        if isinstance(v, Load):
            return self._emit_load(scope, v)
        if isinstance(v, Op):
            args = [self.emit(scope, c) for c in v.children]
            if v.op == "cast":
                expr = cast_expr(args[0].name, args[0].dtype, v.dtype)
            else:
                dtype = compute_dtype(v.children[0].dtype if v.op != "where" else v.dtype)
                expr = OP_RULES[v.op](*[a.name for a in args], dtype=dtype)
            return Emitted(self.assign(scope, v.dtype, expr), v.dtype)
        if isinstance(v, Masked):
            cond = self.emit(scope, v.mask)
            if self._loads_anywhere(v.body):
                # the mask guards nothing: a select the compiler can vectorize, not a branch
                body = self.emit(scope, v.body)
                other = literal(v.other, v.dtype)
                return Emitted(self.assign(scope, v.dtype, f"({cond.name} ? {body.name} : {other})"), v.dtype)
            name = self.tmp()
            scope.lines.append(f"{ctype(v.dtype)} {name} = {literal(v.other, v.dtype)};")
            inner = Scope("masked", scope)
            body = self.emit(inner, v.body)
            scope.lines.append(f"if ({cond.name}) {{")
            scope.lines.extend("    " + line for line in inner.lines)
            scope.lines.append(f"    {name} = {body.name};")
            scope.lines.append("}")
            return Emitted(name, v.dtype)
        if isinstance(v, IndexCheck):
            index, size = self.emit(scope, v.index), self.emit(scope, v.size)
            ok, out = self.tmp(), self.tmp()
            scope.lines.extend(self.index_checks.lines(index.name, size.name, v.error, ok, out))
            return Emitted(out, torch.int64)
        raise NotImplementedError(f"no C++ code for {type(v).__name__}")

    def _loads_anywhere(self, body) -> bool:
        """Whether ``body`` (a masked value) can run where its mask is off too: each load is a
        direct load of a buffer outside the kernel whose index stays inside the buffer on the
        whole loop domain, mask or not (a rotary interleave of (even, odd) pairs), and no op
        is integer arithmetic (a division by zero would trap)."""
        bounds = {index_symbol(name[0], int(name[1:])): n for name, n in self.loop_sizes.items()}
        stack, seen = [body], set()
        while stack:
            v = stack.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if isinstance(v, Load):
                buf = self.buffers.get(v.buffer)
                if v.indirect or buf is None or self.plan.member(v.buffer) is not None:
                    return False
                if not index_below(v.index, bounds, layout_span(buf.layout)):
                    return False
            elif isinstance(v, Op) and not (v.dtype.is_floating_point or v.dtype == torch.bool):
                return False
            elif isinstance(v, Masked):
                return False
            stack.extend(v.children)
        return True

    def _emit_load(self, scope: Scope, v: Load) -> Emitted:
        member = self.plan.member(v.buffer)
        if member is not None:
            if member.role == "reduction":
                return self.reduced[v.buffer]
            return self.emit(scope, member.value)
        names = {}
        for (symbol, _), child in zip(v.indirect, v.children):
            names[symbol] = self.emit(scope, child).name
        pointer = self.pointer(v.buffer, out=False)
        element = f"{pointer}[{self.index(v.index, names)}]"
        if self.narrow is not None:
            element = self.narrow.element(scope, v, pointer, self.index(v.index, names)) or element
        expr = load_expr(element, v.dtype)
        return Emitted(self.assign(scope, v.dtype, expr), v.dtype)

    # -- stores ----------------------------------------------------------------
    def store(self, scope: Scope, member) -> None:
        buf = self.buffers[member.buffer.name]
        reduced = member.role in ("reduction", "column")
        e = self.reduced[member.buffer.name] if reduced else self.emit(scope, member.value)
        pointer = self.pointer(member.buffer.name, out=True)
        # a scatter's index values; it stores only where they are in range (its value's mask)
        names = {symbol: self.emit(scope, v).name for symbol, v in member.indirect}
        line = f"{pointer}[{self.index(member.store_index, names)}] = {store_expr(e.name, e.dtype, buf.dtype)};"
        if member.indirect:
            line = f"if ({self.emit(scope, member.value.mask).name}) {line}"
        scope.lines.append(line)

    def store_result(self, scope: Scope, member, name: str) -> None:
        """Store a reduction result that the C variable ``name`` holds."""
        self.reduced[member.buffer.name] = Emitted(name, member.buffer.acc_dtype)
        self.store(scope, member)

    # -- loops -----------------------------------------------------------------
    def loop_nest(self, outer: Scope, prefix: str, sizes, inner: Scope, pragmas: dict,
                  vector: VectorLoop | None = None, hoisted: Scope | None = None, shared: int = 0) -> None:
        """``for`` loops over ``sizes`` around ``inner``'s lines; ``pragmas[k]`` above loop k,
        ``hoisted``'s lines in the loop around the innermost, before it.

        With ``vector``, the innermost loop is its vector loop and then the scalar loop
        over the rest (vector16.py). With ``shared``, the outer ``shared`` loops (those the
        OpenMP team shares) are one loop over the range of the kernel's rows function
        (thread_ranges.py).
        """
        lines = list(inner.lines)
        around_innermost = len(sizes) - 2
        if vector is not None:
            last = len(sizes) - 1
            lines = vector.loop_lines("0", str(sizes[last]), lines, pragmas.get(last))
            sizes = sizes[:last]
        for k in reversed(range(len(sizes))):
            if k == around_innermost and hoisted is not None:
                lines = hoisted.lines + lines
            if k < shared:
                continue
            head = [pragmas[k]] if k in pragmas else []
            head.append(f"for (int64_t {prefix}{k} = 0; {prefix}{k} < {c_size(sizes[k])}; ++{prefix}{k}) {{")
            lines = head + ["    " + line for line in lines] + ["}"]
        if shared:
            outer_sizes = sizes[:shared]
            strides = [c_size(sympy.Mul(*outer_sizes[k + 1:])) for k in range(shared)]
            lines = range_loop(prefix, [c_size(n) for n in outer_sizes], strides, lines, pragmas.get(0))
            self.shared_extent = c_size(sympy.Mul(*outer_sizes))
        outer.lines.extend(lines)

    def vector_loop(self, loop: Scope, prefix: str, sizes, members: list, cache_written) -> VectorLoop | None:
        """The vector form of the innermost loop over ``sizes`` storing ``members``, if it has one."""
        if not sizes or self.symbolic or sizes[-1] < LANES:
            return None
        vector = VectorLoop.build(self, loop, f"{prefix}{len(sizes) - 1}", members, frozenset(cache_written))
        self.vector16 = self.vector16 or vector is not None
        return vector

    def blocked_x_loop(self, top: Scope, body: Scope, vector: VectorLoop) -> None:
        """A 1-D pointwise loop with a vector form, in blocks: the scalar redo covers one block."""
        n = self.x_sizes[0]
        if n <= BLOCK:
            top.lines.extend(vector.loop_lines("0", str(n), body.lines, "#pragma omp simd"))
            return
        if self.parallel:
            top.lines.append("#pragma omp parallel for schedule(static)")
        top.lines.append(f"for (int64_t xb = 0; xb < {n}; xb += {BLOCK}) {{")
        top.lines.append(f"    const int64_t xe = std::min<int64_t>(xb + {BLOCK}, {n});")
        top.lines.extend("    " + line for line in vector.loop_lines("xb", "xe", body.lines, "#pragma omp simd"))
        top.lines.append("}")

    def interleaved_x_loop(self, top: Scope, body: Scope) -> None:
        """A 1-D pointwise loop whose body is a long chain per element, as ``INTERLEAVE``
        chains at once: element ``x0`` of each quarter of the range, their statements
        interleaved, so that every vector's next operation is independent of the one
        before it (one chain is latency-bound: each op waits for the last); the rest of
        the range after ``INTERLEAVE`` whole parts runs as one chain."""
        n = self.x_sizes[0]
        part = n // INTERLEAVE
        chains = [_renamed(body.lines, k, k * part) for k in range(INTERLEAVE)]
        top.lines.append(self.x_pragmas(innermost_simd=True)[0])
        top.lines.append(f"for (int64_t x0 = 0; x0 < {part}; ++x0) {{")
        top.lines.extend("    " + line for group in zip(*chains) for line in group)
        top.lines.append("}")
        if n > part * INTERLEAVE:
            top.lines.append("#pragma omp simd")
            top.lines.append(f"for (int64_t x0 = {part * INTERLEAVE}; x0 < {n}; ++x0) {{")
            top.lines.extend("    " + line for line in body.lines)
            top.lines.append("}")

    def shared_x_loops(self, innermost_simd: bool) -> int:
        """How many outer x loops the OpenMP team shares, as one collapsed loop: all of them
        around a row, all but a pointwise nest's innermost (simd) loop unless it is the only one."""
        n = len(self.x_sizes)
        if not self.parallel or n == 0:
            return 0
        return max(n - 1, 1) if innermost_simd else n

    def symbolic_shared(self, innermost_simd: bool) -> int:
        """The loops a symbolic nest runs over its rows function's range (``loop_nest``)."""
        return self.shared_x_loops(innermost_simd) if self.symbolic else 0

    def x_pragmas(self, innermost_simd: bool) -> dict:
        """The x loops' pragmas; a symbolic kernel's team shares them through its rows function."""
        n = len(self.x_sizes)
        if n == 0:
            return {}
        pragmas = {}
        shared = self.shared_x_loops(innermost_simd)
        if shared and not self.symbolic:
            simd = " simd" if innermost_simd and n == 1 else ""
            collapse = f" collapse({shared})" if shared > 1 else ""
            pragmas[0] = f"#pragma omp parallel for{simd}{collapse} schedule(static)"
        if innermost_simd:
            pragmas.setdefault(n - 1, "#pragma omp simd")
        return pragmas

    # -- reductions: the table of lowering/reductions.py, one rule per combine and finalize --
    def acc_dtype(self, member) -> torch.dtype:
        kind = reduction_kind(member.buffer.reduction_type)
        if kind.compares_inputs:
            return compute_dtype(member.value.dtype)
        if kind.finalize == "nonzero":
            return torch.bool
        return compute_dtype(member.buffer.acc_dtype)

    def accumulators(self, member) -> list:
        """(C type, name, initial value, OpenMP reduction op or None) of a reduction's accumulators."""
        buf = member.buffer
        kind = reduction_kind(buf.reduction_type)
        acc = self.acc_dtype(member)
        t = ctype(acc)
        a = f"acc_{buf.name}"
        start = _identity(kind, t, acc)
        if kind.finalize == "nonzero":   # any / all accumulate 0 or 1
            return [("int", a, start, OPENMP_COMBINE[kind.combine])]
        if kind.tracks_index:            # a sequential scan: the value and its position
            return [(t, a, start, None), ("int64_t", f"idx_{buf.name}", "0", None)]
        accs = [(t, a, start, OPENMP_COMBINE[kind.combine])]
        if kind.nan == "propagate" and acc.is_floating_point:
            accs.append(("int", f"nan_{buf.name}", "0", "|"))
        return accs

    def reduction_init(self, row: Scope, member) -> list:
        """Declare the accumulators of one row; returns (name, OpenMP op) for the r loop's clauses."""
        accs = self.accumulators(member)
        for t, name, start, _ in accs:
            row.lines.append(f"{t} {name} = {start};")
        if any(op is None for *_, op in accs):
            return [(accs[0][1], None)]
        return [(name, op) for _, name, _, op in accs]

    def reduction_update(self, loop: Scope, member) -> None:
        buf = member.buffer
        kind = reduction_kind(buf.reduction_type)
        combine, acc = kind.combine, self.acc_dtype(member)
        v = self.emit(loop, member.value).name
        a, nan = f"acc_{buf.name}{self.lane}", f"nan_{buf.name}{self.lane}"
        if kind.tracks_index:   # the first extremum; with nan="extreme" a NaN is the largest and smallest
            cmp = ">" if combine == "max" else "<"
            take = f"({v} {cmp} {a})"
            if kind.nan == "extreme" and acc.is_floating_point:
                take = f"(!({a} != {a}) && ({take} || {v} != {v}))"
            loop.lines.append(f"if {take} {{ {a} = {v}; idx_{buf.name} = {self.r_linear()}; }}")
        elif combine in ("add", "moments"):   # moments: the sum for the mean (variance_pass)
            loop.lines.append(f"{a} += {v};")
        elif combine == "mul":
            loop.lines.append(f"{a} *= {v};")
        elif combine in ("or", "and"):
            loop.lines.append(f"{a} {'|' if combine == 'or' else '&'}= ({v} != 0);")
        elif combine in ("max", "min"):
            cmp = ">" if combine == "max" else "<"
            loop.lines.append(f"{a} = {v} {cmp} {a} ? {v} : {a};")
            if kind.nan == "propagate" and acc.is_floating_point:
                loop.lines.append(f"{nan} |= ({v} != {v});")
        else:
            raise NotImplementedError(f"no C++ rule for the combine {combine!r} ({kind.name})")

    def reduction_finish(self, row: Scope, member) -> None:
        buf = member.buffer
        kind = reduction_kind(buf.reduction_type)
        acc = self.acc_dtype(member)
        a, nan = f"acc_{buf.name}{self.lane}", f"nan_{buf.name}{self.lane}"
        if kind.nan == "propagate" and acc.is_floating_point:
            row.lines.append(f"if ({nan}) {a} = std::numeric_limits<{ctype(acc)}>::quiet_NaN();")
        if kind.finalize == "index":
            self.reduced[buf.name] = Emitted(f"idx_{buf.name}", torch.int64)
        elif kind.finalize == "nonzero":
            self.reduced[buf.name] = Emitted(f"({a} != 0)", torch.bool)
        elif kind.finalize == "variance":
            self.variance_pass(row, member)
        elif kind.finalize == "value":
            self.reduced[buf.name] = Emitted(a, buf.acc_dtype)
        else:
            raise NotImplementedError(f"no C++ rule for the finalize {kind.finalize!r} ({kind.name})")

    def variance_pass(self, row: Scope, member) -> None:
        """Second pass of a variance: the sum of squared deviations from the row's mean."""
        buf = member.buffer
        acc = self.acc_dtype(member)
        t = ctype(acc)
        mean, m2 = f"mean_{buf.name}", f"m2_{buf.name}"
        row.lines.append(f"{t} {mean} = acc_{buf.name} / {t}({c_size(self.rnumel)});")
        row.lines.append(f"{t} {m2} = 0;")
        loop = Scope("rloop", row)
        v = self.emit(loop, member.value).name
        loop.lines.append(f"{t} d_{buf.name} = {v} - {mean};")
        loop.lines.append(f"{m2} += d_{buf.name} * d_{buf.name};")
        self.loop_nest(row, "r", self.r_sizes, loop, self.r_pragmas([(m2, "+")]))
        var = self.tmp()
        if self.symbolic:
            row.lines.append(f"{t} {var} = {m2} / ({t}({c_size(self.rnumel)}) - {t}({float(buf.correction)!r}));")
        else:
            row.lines.append(f"{t} {var} = {m2} / {t}({float(self.rnumel - buf.correction)!r});")
        self.reduced[buf.name] = Emitted(var, buf.acc_dtype)

    def r_linear(self) -> str:
        terms, stride = [], 1
        for k in reversed(range(len(self.r_sizes))):
            terms.append(f"r{k}" if stride == 1 else f"r{k} * {c_size(stride)}")
            stride = stride * self.r_sizes[k]
        return " + ".join(reversed(terms)) or "0"

    def r_pragmas(self, accs) -> dict:
        """simd (and, for a single row, parallel) over the innermost r loop with these reductions."""
        if not self.r_sizes:
            return {}
        if any(op is None for _, op in accs):
            return {}
        clauses = " ".join(f"reduction({op}:{name})" for name, op in accs)
        whole_row_parallel = self.parallel and not self.x_sizes and len(self.r_sizes) == 1
        head = (f"#pragma omp parallel for simd schedule(static){self.parallel_if}" if whole_row_parallel
                else "#pragma omp simd")
        return {len(self.r_sizes) - 1: f"{head} {clauses}".rstrip()}

    def plan_row_cache(self, row: Scope, row_stores: list) -> None:
        """Declare the scratch arrays of values that several passes over the row need."""
        passes = [[m.value for m in self.plan.members if m.role in ("reduction", "column") and m.stage == stage]
                  for stage in range(self.plan.num_stages)]
        passes.append([m.value for m in row_stores] +
                      [m.value for m in self.plan.members if m.role == "column" and m.stage == self.plan.num_stages])
        # a symbolic row is planned at its hint (the cache is right for any length, and
        # kept per thread on the heap: a row longer than the hint's only costs memory)
        rnumel = self.sizes.size_hint(self.rnumel) if self.symbolic else self.rnumel
        planner = RowCachePlanner(self.depends_on_r, self.plan.member, rnumel,
                                  lambda v: compute_dtype(v.dtype).itemsize)
        for k, v in enumerate(planner.plan(passes).values()):
            name = f"row_cache{k}"
            self.row_cache[id(v)] = name
            row.lines.extend(self.row_array(ctype(v.dtype), name))

    @staticmethod
    def size_text(n) -> str:
        return c_size(n)

    def row_array(self, t: str, name: str) -> list:
        """Lines declaring a scratch array of one row: on the stack for a static row, kept
        per thread on the heap for a symbolic one (grown to the call's row length)."""
        if not self.symbolic:
            return [f"alignas(64) {t} {name}[{self.rnumel}];"]
        n = c_size(self.rnumel)
        return [f"static thread_local std::vector<{t}> {name}_store;",
                f"if (int64_t({name}_store.size()) < {n}) {name}_store.resize({n});",
                f"{t}* __restrict__ {name} = {name}_store.data();"]

    # -- the kernel ----------------------------------------------------------------
    def generate(self) -> CppKernel:
        top = Scope("top")
        if not self.plan.is_reduction:
            if len(self.x_sizes) > 1:
                self.x_outer = Scope("xouter", top)
            body = Scope("xloop", self.x_outer or top)
            stored = [m for m in self.plan.members if m.stored]
            for m in stored:
                self.store(body, m)
            vector = self.vector_loop(body, "x", self.x_sizes, stored, ())
            if vector is not None and len(self.x_sizes) == 1:
                self.blocked_x_loop(top, body, vector)
            elif vector is None and not self.symbolic and interleaves(self.x_sizes, self.plan.members, body.lines):
                self.interleaved_x_loop(top, body)
            else:
                self.loop_nest(top, "x", self.x_sizes, body, self.x_pragmas(innermost_simd=True), vector,
                               self.x_outer, self.symbolic_shared(innermost_simd=True))
            return self.finish(top)
        columns = ColumnSums(self) if not self.symbolic and ColumnSums.applies(self) else None
        if columns is None and not self.symbolic and wants_columns(self):
            generate_columns(self, top)
            return self.finish(top)
        row = Scope("row", top)
        self.row = row
        if NarrowLoads.applies(self):
            self.narrow = NarrowLoads(self)
        row_stores = [m for m in self.plan.members if m.stored and m.role == "xr"]
        self.plan_row_cache(row, row_stores)
        for stage in range(self.plan.num_stages):
            members = [m for m in self.plan.members if m.role == "reduction" and m.stage == stage]
            accs = []
            for m in members:
                accs.extend(self.reduction_init(row, m))
            loop = Scope("rloop", row)
            for m in members:
                self.reduction_update(loop, m)
            if columns is not None:
                columns.update(loop, stage)
            self.loop_nest(row, "r", self.r_sizes, loop, self.r_pragmas(accs))
            for m in members:
                self.reduction_finish(row, m)
        last_columns = columns is not None and columns.at_stage(self.plan.num_stages)
        if row_stores or last_columns:
            loop = Scope("rloop", row)
            cache_written = set(self.row_cache_written)   # by earlier passes
            for m in row_stores:
                self.store(loop, m)
            if last_columns:
                columns.update(loop, self.plan.num_stages)
            pragmas = self.r_pragmas([])
            # the vector loop may run twice (vector16.py): only stores, and no row split across threads
            vector = None
            if not last_columns and "parallel" not in pragmas.get(len(self.r_sizes) - 1, ""):
                vector = self.vector_loop(loop, "r", self.r_sizes, row_stores, cache_written)
            self.loop_nest(row, "r", self.r_sizes, loop, pragmas, vector)
        for m in self.plan.members:
            if m.stored and m.role in ("reduction", "x"):
                self.store(row, m)
        self.parallel = self.parallel and (len(self.x_sizes) > 0 or len(self.r_sizes) == 1)
        pragmas = self.x_pragmas(innermost_simd=False) if self.symbolic or self.xnumel > 1 else {}
        if columns is not None:
            columns.wrap(top, row, pragmas)
        else:
            self.loop_nest(top, "x", self.x_sizes, row, pragmas, shared=self.symbolic_shared(innermost_simd=False))
        return self.finish(top)

    def finish(self, top: Scope) -> CppKernel:
        if self.parallel_if and any(self.parallel_if in line for line in top.lines):
            top.lines = self.serial_or_parallel(top.lines)
        params = []
        for buffer, out in self.params:
            t = storage_type(self.buffers[buffer].dtype)
            # an output written over an input it reads (the memory plan's in place reuse)
            # shares storage with it: no __restrict__ promise for either pointer
            restrict = "" if buffer in self.shared else "__restrict__ "
            params.append(f"{'' if out else 'const '}{t}* {restrict}{self.pointer_of[buffer]}")
        # the size symbols the code reads (the nest's, and the range's and the work's it is
        # shared out by): parameters after the pointers
        body = "\n".join(top.lines + ([self.shared_extent, self.work] if self.shared_extent else []))
        symbols = [s.name for s in plan_size_symbols(self.plan) if re.search(rf"\b{s.name}\b", body)]
        params += [f"int64_t {name}" for name in symbols]
        result = "int64_t" if self.index_checks.errors else "void"   # index checks return their bits
        if self.shared_extent is not None:
            args = [self.pointer_of[buffer] for buffer, _ in self.params] + symbols
            lines = rows_and_kernel(self.name, result, params, args, top.lines, self.shared_extent, self.work,
                                    PARALLEL_MIN_ELEMENTS, self.index_checks)
        else:
            lines = [f"static {result} {self.name}({', '.join(params)}) {{"]
            lines += ["    " + line for line in self.index_checks.wrap(top.lines)]
            lines.append("}")
        return CppKernel(self.name, "\n".join(lines) + "\n", list(self.params), self.plan.is_reduction,
                         self.parallel, self.vector16, symbols, self.index_checks.by_bit())

    def serial_or_parallel(self, lines: list) -> list:
        """A symbolic single row split across threads, twice: the OpenMP team's loops for enough
        work, else serial ones (an OpenMP loop with a false ``if`` still runs its outlined,
        often unvectorized, body: measured 75x slower on a GELU over 8192 floats). Its
        passes are parallel loops one after another, with no range of one loop to share
        out as a nest's rows function does (thread_ranges.py)."""
        team = f"parallel for simd schedule(static){self.parallel_if}"
        return ([f"if ({self.work} >= {PARALLEL_MIN_ELEMENTS}) {{"] + ["    " + line for line in lines] + ["} else {"]
                + ["    " + line.replace(team, "simd") for line in lines] + ["}"])


# A 1-D pointwise kernel computing at least INTERLEAVE_MIN_OPS ops per element, over at
# least INTERLEAVE_MIN_ELEMENTS elements, runs INTERLEAVE independent chains per iteration
# (``interleaved_x_loop``): a 60-op chain over 1M floats took 2.8x less time (bench/NOTES.md).
INTERLEAVE = 4
INTERLEAVE_MIN_OPS = 24
INTERLEAVE_MIN_ELEMENTS = 4096
_TEMPORARY = re.compile(r"\bt(\d+)\b")
_X0 = re.compile(r"\bx0\b")


def interleaves(x_sizes, members: list, lines: list) -> bool:
    """Whether a pointwise loop over ``x_sizes`` computing ``members`` with body ``lines`` is
    worth interleaving: one dim, enough elements and ops per element (members read by others
    are computed inline), and straight-line statements (a masked load's ``if`` block cannot
    be interleaved line by line)."""
    if len(x_sizes) != 1 or x_sizes[0] < INTERLEAVE_MIN_ELEMENTS:
        return False
    if any(line.rstrip().endswith(("{", "}")) for line in lines):
        return False
    return sum(op_count(m.value) for m in members) >= INTERLEAVE_MIN_OPS


def _renamed(lines: list, chain: int, offset: int) -> list:
    """``lines`` computing element ``x0 + offset``, with temporaries of their own."""
    out = []
    for line in lines:
        line = _TEMPORARY.sub(lambda m: f"t{m.group(1)}_{chain}", line)
        out.append(_X0.sub(f"(x0 + {offset})", line) if offset else line)
    return out


def _has_r(expr) -> bool:
    return any(s.name.startswith("r") for s in expr.free_symbols)


def c_size(n) -> str:
    """A size in C: a number, or an expression of the kernel's size parameters."""
    return c_index(n) if isinstance(n, sympy.Expr) else str(n)


def generate_cpp_kernel(plan: KernelPlan, buffers: dict, name: str, shared: frozenset = frozenset(),
                        sizes: SizeVars | None = None) -> CppKernel:
    return CppKernelWriter(plan, buffers, name, shared, sizes).generate()
