"""What every code generator needs from a kernel group, independent of the target.

``prepare_kernel`` turns a scheduled group into a ``KernelPlan``:

- each member's value and store index rewritten into kernel index symbols
  (``x0, x1, ...`` parallel, ``r0, r1, ...`` reduced);
- the parallel loop dimensions ordered as the stored outputs lie in memory (a
  channels-last output iterates channels fastest, so neighbouring lanes touch
  neighbouring addresses instead of addresses a row of channels apart);
- adjacent loop dimensions merged wherever every index in the kernel is affine
  in them with contiguous coefficients (a contiguous [N, D] loop becomes one
  loop over N*D; a broadcast bias keeps two), so indices need few divisions;
- the stages of a looped reduction (reductions that need earlier reductions
  run in later passes over r).

``format_index`` prints an index expression in the Python/C-like syntax both
Triton and C++ accept.
"""
from __future__ import annotations

import dataclasses

import sympy

from ..lowering.ir import ComputedBuffer, ScatterBuffer
from ..lowering.sizes import (
    FloorDiv, Mod, index_symbol, is_index_symbol, linear_coefficient, product, simplify_with_ranges,
)
from ..lowering.values import IndexValue, Load, substitute_index, walk
from ..schedule.groups import KernelGroup, kernel_bounds


@dataclasses.dataclass(eq=False)
class Member:
    buffer: ComputedBuffer
    role: str              # "reduction" | "xr" | "x" | "column"
    value: object          # Value in kernel symbols
    store_index: sympy.Expr
    stored: bool
    stage: int = 0         # for reductions: the pass over r that computes it
    # a scatter's index symbols in ``store_index`` and their values (in kernel symbols)
    indirect: tuple = ()


@dataclasses.dataclass(eq=False)
class KernelPlan:
    group: KernelGroup
    x_sizes: tuple
    r_sizes: tuple
    members: list          # Member, in dependency order

    @property
    def xnumel(self) -> sympy.Expr:
        return product(self.x_sizes)

    @property
    def rnumel(self) -> sympy.Expr:
        return product(self.r_sizes)

    @property
    def is_reduction(self) -> bool:
        return bool(self.r_sizes)

    def member(self, name: str):
        for m in self.members:
            if m.buffer.name == name:
                return m
        return None

    @property
    def num_stages(self) -> int:
        return 1 + max((m.stage for m in self.members if m.role == "reduction"), default=-1)


def _merge_dims(sizes, symbols, exprs):
    """Merge adjacent dims where every expr is affine with contiguous coefficients.

    Returns the merged sizes and, per merged dim, the symbol that carries it:
    where ``outer * size_inner + inner`` is the merged index, every expr reads
    ``outer`` only through that sum, so ``outer`` is set to 0 and ``inner``
    runs over both.
    """
    dims = list(zip(symbols, sizes))
    merged = True
    while merged and len(dims) > 1:
        merged = False
        for k in range(len(dims) - 1):
            (outer, so), (inner, si) = dims[k], dims[k + 1]
            if all(_contiguous_pair(e, outer, inner, si) for e in exprs):
                exprs = [e.xreplace({outer: sympy.Integer(0)}) for e in exprs]
                dims[k:k + 2] = [(inner, so * si)]
                merged = True
                break
    return [size for _, size in dims], [s for s, _ in dims]


def _contiguous_pair(expr, outer, inner, inner_size) -> bool:
    co, ci = linear_coefficient(expr, outer), linear_coefficient(expr, inner)
    return co is not None and ci is not None and sympy.expand(co - ci * inner_size) == 0


def _memory_order(symbols: list, stores: list) -> list:
    """The loop dims, outermost first, in the order the first stored output lies in memory.

    Dims are sorted by that store's stride along them, largest first (a stable sort, so
    dims of equal stride and a row-major store keep their order). Kept as they are when
    a stride is not a known number (a symbolic size, an index that is not affine)."""
    identity = list(range(len(symbols)))
    if len(symbols) < 2 or not stores:
        return identity
    strides = [linear_coefficient(stores[0], s) for s in symbols]
    if any(st is None or not st.is_Integer for st in strides):
        return identity
    # a dim the store does not move along (stride 0) goes outermost: lanes never share an address
    return sorted(identity, key=lambda k: -abs(int(strides[k])) if strides[k] != 0 else -float("inf"))


def prepare_kernel(group: KernelGroup) -> KernelPlan:
    raw = []
    bounds = kernel_bounds(group.x_ranges, group.r_ranges)

    def rewrite(expr):
        return simplify_with_ranges(expr, bounds)

    for node in group.nodes:
        role = group.role(node)
        mapping = group.var_mapping(node)
        raw.append((node, role, substitute_index(node.value, mapping, rewrite),
                    rewrite(node.store_index().xreplace(mapping))))
    indirect = {node.name: [(s, substitute_index(v, group.var_mapping(node), rewrite)) for s, v in node.indirect]
                for node in group.nodes if isinstance(node, ScatterBuffer)}
    in_group = {n.name for n in group.nodes}
    exprs = []
    for node, role, value, store in raw:
        exprs.append(store)
        exprs.extend(e for name, e in _loads_and_indices(value) if name not in in_group)
    stores = [store for node, _, _, store in raw if node.name in group.stores]
    subst, sizes_out = {}, {}
    for prefix, sizes in (("x", group.x_ranges), ("r", group.r_ranges)):
        symbols = [index_symbol(prefix, k) for k in range(len(sizes))]
        sizes = list(sizes)
        if prefix == "x":
            order = _memory_order(symbols, stores)
            symbols, sizes = [symbols[k] for k in order], [sizes[k] for k in order]
        new_sizes, kept = _merge_dims(sizes, symbols, exprs)
        dense = {old: index_symbol(prefix, k) for k, old in enumerate(kept)}
        for s in symbols:
            subst[s] = dense.get(s, sympy.Integer(0))
        sizes_out[prefix] = tuple(new_sizes) if symbols else ()
    members = [Member(node, role, substitute_index(value, subst), store.xreplace(subst), node.name in group.stores,
                      indirect=tuple((s, substitute_index(v, subst)) for s, v in indirect.get(node.name, ())))
               for node, role, value, store in raw]
    x_sizes, r_sizes = sizes_out["x"], sizes_out["r"]
    plan = KernelPlan(group, tuple(x_sizes), tuple(r_sizes), members)
    _assign_stages(plan)
    return plan


def _loads_and_indices(value):
    for v in walk(value):
        if isinstance(v, Load):
            yield v.buffer, v.index
        elif isinstance(v, IndexValue):
            yield None, v.expr


def _assign_stages(plan: KernelPlan) -> None:
    """A reduction that reads an earlier reduction's result runs in a later pass over r."""
    ready: dict[str, int] = {}   # member -> first pass in which its value is available

    def available(dep: str) -> int:
        return ready[dep] + 1 if plan.member(dep).role == "reduction" else ready[dep]

    for m in plan.members:
        deps = {ld.buffer for ld in walk(m.value) if isinstance(ld, Load) and plan.member(ld.buffer)}
        first = max((available(d) for d in deps), default=0)
        if m.role in ("reduction", "column"):   # a column sum accumulates in that pass
            m.stage = first
        ready[m.buffer.name] = first


def plan_size_symbols(plan: KernelPlan) -> list:
    """The size symbols a kernel's code may read (its sizes, indices and index values),
    sorted by name: the kernel's size arguments."""
    found, indirect = set(), set()   # indirect: the symbols that gathers and scatters bind
    for n in (*plan.x_sizes, *plan.r_sizes):
        found |= n.free_symbols
    for m in plan.members:
        found |= m.store_index.free_symbols
        indirect.update(s for s, _ in m.indirect)
        for v in walk(m.value):
            if isinstance(v, Load):
                found |= v.index.free_symbols
                indirect.update(s for s, _ in v.indirect)
            elif isinstance(v, IndexValue):
                found |= v.expr.free_symbols
    return sorted((s for s in found - indirect if not is_index_symbol(s)), key=lambda s: s.name)


def layout_span(layout) -> sympy.Expr:
    """Elements from a layout's first element to its last reachable one, inclusive (its
    offset not counted); an expression of the size symbols for symbolic layouts (whose
    strides are never negative: only a flip of static sizes makes one)."""
    return sympy.expand(sum(((s - 1) * (abs(st) if st.is_Integer else st)
                             for s, st in zip(layout.shape, layout.stride)), sympy.Integer(0)) + 1)


def _operand(expr: sympy.Expr, names: dict) -> str:
    """A divisor in parentheses unless it is one number or symbol (``x // (2*s0)``)."""
    text = format_index(expr, names)
    return text if expr.is_Atom or text.startswith("(") else f"({text})"


def format_index(expr: sympy.Expr, names: dict | None = None) -> str:
    """``expr`` in the integer syntax shared by Triton and C (non-negative operands)."""
    names = names or {}
    if expr.is_Integer:
        return str(expr)
    if expr.is_Symbol:
        return names.get(expr, expr.name)
    if isinstance(expr, FloorDiv):
        return f"({format_index(expr.args[0], names)} // {_operand(expr.args[1], names)})"
    if isinstance(expr, Mod):
        return f"({format_index(expr.args[0], names)} % {_operand(expr.args[1], names)})"
    if expr.is_Add:
        terms = [format_index(a, names) for a in sorted(expr.args, key=sympy.default_sort_key)]
        out = terms[0]
        for t in terms[1:]:
            out += f" - {t[1:]}" if t.startswith("-") else f" + {t}"
        return f"({out})" if len(terms) > 1 else out
    if expr.is_Mul:
        coeff, rest = expr.as_coeff_Mul()
        body = "*".join(format_index(a, names) for a in sympy.Mul.make_args(rest))
        if coeff == 1:
            return body
        if coeff == -1:
            return f"-{body}"
        return f"{int(coeff)}*{body}"
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        return "*".join([format_index(expr.base, names)] * int(expr.exp))
    raise NotImplementedError(f"cannot print index expression {expr}")

