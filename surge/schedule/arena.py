"""The arena: the storages the memory plan allocates, as offsets in one allocation per call.

``plan_memory`` decides which buffers share a storage (a dead buffer's reuse, an output
written in place over what its kernel reads) and when each storage dies. Each storage the
plan allocates for a kernel output is a *slot* with a lifetime (the step that allocates it
to the last step that reads a buffer stored in it) and a size in bytes, rounded up to the
target's alignment. Slots whose lifetimes overlap get disjoint byte ranges; others may
share bytes. The host code allocates the arena once per call, before the first step
that stores into it, passes ``arena + offset`` (an address, no tensor at all, to C++
segments and compiled Triton kernels; a view where a tensor is needed) instead of
allocating each buffer, and frees it after the last step that reads it.

What stays outside (its own allocation, as before):

- graph outputs, and every buffer whose storage becomes one (a reuse chain ending in an
  output, a base an output views): they outlive the call, and a view into the arena
  would keep the whole arena alive with them;
- buffers larger than the target's ``arena_buffer_limit``: a large buffer costs its
  memory traffic, not its allocator call, and outside the arena its memory goes back to
  the allocator at its last use, where the extern calls (which allocate through torch)
  can take it: the peak stays what it was (glibc also serves blocks above 32 MB with a
  fresh ``mmap``, whose page faults cost more than a whole call's allocator calls);
- extern results, which torch allocates (``bench/NOTES.md`` measures ``out=`` forms);
- the first operand of an extern op that reads its storage rather than its elements
  (``STORAGE_RELATIVE``): a view into the arena would be taken for the whole arena;
- where the target says a view of the arena costs more than an allocation
  (``Target.views_in_arena``: C++), the buffers extern calls read, of which the host
  code needs a tensor: there only buffers that kernels alone read live in the arena,
  as addresses.

Symbolic sizes: offsets and the arena's size are expressions of the size symbols, which
the host code evaluates per call. Two slots share bytes only where the comparison holds
for every size in range (``SizeVars.known_leq``); otherwise the later one is placed
above everything placed so far, which is valid for every size.
"""
from __future__ import annotations

import dataclasses
import itertools

import sympy
import torch

from ..lowering.ir import ComputedBuffer, ExternBuffer, Layout, TensorArg
from ..lowering.size_vars import DEFAULT_LOWER_BOUND
from ..lowering.sizes import FloorDiv


@dataclasses.dataclass(frozen=True)
class Slot:
    root: str                 # the buffer whose allocation the storage is
    offset: sympy.Expr        # bytes from the arena's start (a multiple of the alignment)
    nbytes: sympy.Expr        # bytes it spans, rounded up to the alignment
    first: int                # the step that allocates it
    last: int                 # the last step that reads a buffer stored in it


@dataclasses.dataclass
class Arena:
    slots: dict               # root name -> Slot
    size: sympy.Expr          # bytes of the one allocation per call (0: no arena)
    alignment: int
    root_of: dict             # every buffer stored in a slot -> the slot's root

    @property
    def steps(self) -> tuple:
        """The first step that allocates a slot and the last that reads one: the host code
        allocates the arena just before the one and frees it just after the other."""
        return (min(s.first for s in self.slots.values()), max(s.last for s in self.slots.values()))

    def slot(self, name: str) -> Slot | None:
        root = self.root_of.get(name)
        return None if root is None else self.slots[root]

    def __str__(self) -> str:
        lines = [f"arena: {self.size} bytes, {len(self.slots)} slots, aligned to {self.alignment}"]
        members = {}
        for name, root in self.root_of.items():
            members.setdefault(root, []).append(name)
        for root, s in sorted(self.slots.items(), key=lambda kv: (sympy.default_sort_key(kv[1].offset), kv[0])):
            lines.append(f"  [{s.offset}, +{s.nbytes}) steps {s.first}-{s.last}: {', '.join(members[root])}")
        return "\n".join(lines)


def extent_bytes(layout: Layout, dtype) -> sympy.Expr:
    """Bytes a tensor of ``layout`` spans from its storage's start."""
    if any(n == 0 for n in layout.shape):
        return sympy.Integer(0)
    elements = layout.offset + 1 + sum(((n - 1) * s for n, s in zip(layout.shape, layout.stride)), sympy.Integer(0))
    return sympy.expand(elements * dtype.itemsize)


def aligned(nbytes: sympy.Expr, alignment: int, sizes) -> sympy.Expr:
    if sizes.known_divisible(nbytes, alignment):
        return sympy.expand(nbytes)
    if nbytes.is_Integer:
        return sympy.Integer(-(-int(nbytes) // alignment) * alignment)
    return alignment * FloorDiv(sympy.expand(nbytes + alignment - 1), alignment)


def known_leq(sizes, a, b) -> bool:
    """``a <= b`` for every size, where the ``FloorDiv(x, d)`` terms of the difference (of
    aligned sizes) are replaced by bounds: where they add, by ``(x - d + 1) / d`` or by the
    quotient of ``x``'s least value (either may prove it); where they subtract, by ``x / d``."""
    diff = sympy.expand(b - a)
    if not diff.has(FloorDiv):
        return sizes.known_leq(a, b)
    choices, scale = [], 1
    for term in sorted(diff.atoms(FloorDiv), key=sympy.default_sort_key):
        coeff = diff.coeff(term)
        x, d = term.args
        if not coeff.is_Number or not d.is_Integer:
            return False
        scale = sympy.ilcm(scale, int(d))
        if coeff < 0:
            choices.append([(term, x / d)])
        else:
            least = x.xreplace({s: sizes.lower.get(s, DEFAULT_LOWER_BOUND) for s in x.free_symbols})
            bounds = [(term, (x - d + 1) / d)]
            if least.is_Integer and sizes.known_leq(least, x):
                bounds.append((term, sympy.Integer(int(least) // int(d))))
            choices.append(bounds)
    tries = itertools.product(*choices) if len(choices) <= 4 else (   # a few terms: every combination
        [c[0] for c in choices], [c[-1] for c in choices])
    for bounds in tries:
        bounded = sympy.expand(diff.xreplace(dict(bounds)) * scale)
        if not bounded.has(FloorDiv) and sizes.known_leq(0, bounded):
            return True
    return False


def _chains(plan, outside: set) -> tuple:
    """root -> (allocating step, the names stored in it) for every storage the plan allocates
    at a kernel step, and the name -> root map; chains holding a name of ``outside`` are left out."""
    root_of, first, members = {}, {}, {}
    for k, sm in enumerate(plan.steps):
        for name, src in sm.allocate:
            if src is None:
                root_of[name], first[name], members[name] = name, k, [name]
            elif src in root_of:
                root_of[name] = root_of[src]
                members[root_of[src]].append(name)
    keep = {root for root, names in members.items() if not outside.intersection(names)}
    return ({root: (first[root], members[root]) for root in keep},
            {name: root for name, root in root_of.items() if root in keep})


# Extern ops whose result depends on their first operand's storage, not only on its
# elements: ``as_strided`` counts its offset from the storage's start, and ATen's
# ``*_scatter`` ops clone the whole storage (``clone_preserve_strides``) before scattering,
# ``as_strided_scatter`` at an offset from the storage's start. Given a view into the
# arena, they would copy the whole arena and scatter at the arena's start: the result
# (the view's window of the copy) would not hold the scattered values.
STORAGE_RELATIVE = frozenset({
    torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_copy.default,
    torch.ops.aten.as_strided_scatter.default, torch.ops.aten.slice_scatter.default,
    torch.ops.aten.select_scatter.default, torch.ops.aten.diagonal_scatter.default,
})


def storage_operands(graph) -> set:
    """The buffers that extern calls read as storages (``STORAGE_RELATIVE``): each keeps
    an allocation of its own."""
    return {buf.args[0].buffer for buf in graph.buffers
            if isinstance(buf, ExternBuffer) and buf.op in STORAGE_RELATIVE
            and buf.args and isinstance(buf.args[0], TensorArg)}


def extern_operands(graph) -> set:
    """The buffers extern calls read: the host code holds a tensor of each."""
    names = set()

    def visit(value):
        if isinstance(value, TensorArg):
            names.add(value.buffer)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)

    for buf in graph.buffers:
        if isinstance(buf, ExternBuffer):
            visit(list(buf.args) + list(buf.kwargs.values()))
    return names


def plan_arena(graph, plan, target) -> Arena:
    """The arena of ``plan``'s storages (``plan_memory``'s result), laid out by the target's
    alignment, size limit and ``views_in_arena``."""
    alignment, limit = target.buffer_alignment, target.arena_buffer_limit
    freed_at = {}
    for k, sm in enumerate(plan.steps):
        for name in sm.free_after:
            freed_at[name] = k
    by_name, sizes = graph.by_name, graph.sizes
    # never freed: a graph output, or a storage that one holds (a view's base)
    outside = {name for sm in plan.steps for name, _ in sm.allocate if name not in freed_at}
    outside |= storage_operands(graph)
    if not target.views_in_arena:
        outside |= extern_operands(graph)
    chains, root_of = _chains(plan, outside)
    wanted = []
    for root, (first, names) in chains.items():
        buf = by_name[root]
        if not isinstance(buf, ComputedBuffer):
            continue
        nbytes = aligned(extent_bytes(buf.layout, buf.dtype), alignment, sizes)
        if sizes.size_hint(nbytes) > limit or nbytes == 0:
            continue
        wanted.append((root, nbytes, first, max(freed_at[n] for n in names)))
    # largest first, each at the lowest offset clear of the slots it lives alongside
    wanted.sort(key=lambda w: (-sizes.size_hint(w[1]), w[2], w[0]))
    placed: list[Slot] = []
    top = sympy.Integer(0)   # known to be at or above every placed slot's end
    for root, nbytes, first, last in wanted:
        alongside = [s for s in placed if s.first <= last and first <= s.last]
        candidates = [sympy.Integer(0)] + sorted((s.offset + s.nbytes for s in alongside),
                                                 key=sizes.size_hint) + [top]
        for offset in candidates:
            end = offset + nbytes
            if all(known_leq(sizes, end, s.offset) or known_leq(sizes, s.offset + s.nbytes, offset)
                   for s in alongside):
                break
        else:
            offset = top   # above every placed slot (what ``top`` stands for)
        slot = Slot(root, sympy.expand(offset), nbytes, first, last)
        placed.append(slot)
        end = sympy.expand(offset + nbytes)
        if known_leq(sizes, top, end):
            top = end
        elif not known_leq(sizes, end, top):
            top = sympy.expand(top + nbytes)   # offset <= top: above both
    slots = {s.root: s for s in placed}
    return Arena(slots, top, alignment, {name: root for name, root in root_of.items() if root in slots})
