"""Split a joint forward+backward graph into a forward and a backward graph.

Which intermediates does the forward save for the backward? Saving costs memory
from forward to backward; recomputing costs time in the backward. surge decides
with a minimum cut over bytes (the idea of activation-checkpointing partitioners):

- Each tensor node ``n`` becomes an edge ``n_in -> n_out`` whose capacity is the
  bytes it would take to save it (graph inputs cost nothing: they are alive
  anyway). Data edges ``n_out -> user_in`` are infinite.
- The source feeds every graph input and every node that must not be
  recomputed: anything that is not cheap pointwise/view work (matmul,
  convolution, reductions, random ops, extern calls).
- Every node of the backward proper (one that depends on a tangent) drains into
  the sink.
- Recomputing is cheap but not free: each recomputable op also hangs from the
  source by a small edge (``RECOMPUTE``), cut when the op lands on the backward's
  side. Among cuts of equal bytes, the one that recomputes less wins: a residual
  stream is saved where the backward reads it, not rebuilt from every matmul
  output that was added into it.

The saved values are the cut edges: the cheapest set of tensors that separates
what the forward computes from what the backward needs. Pointwise work between
a saved tensor and its backward use is recomputed in the backward.

Bytes held are not the whole cost of saving a tensor: the forward must also have
written it to memory. A tensor that the forward writes anyway (a matmul's or
reduction's result, a forward output, an operand of a library call, a value read
again after a library call) costs only the memory; a fused pointwise intermediate
would otherwise live in registers of the kernel that computes it, so saving it
adds a store that exists only for the backward. Such intermediates cost a little more (``STORE_ONLY_FOR_SAVING``): of
two cuts within that margin in bytes, the cut of already-written tensors wins
(a LayerNorm saves the matmul output it reads, not ``x - mean``).
"""
from __future__ import annotations

import collections
import dataclasses
import operator

import torch
import torch.fx

from ..passes.dce import eliminate_dead_code
from ..passes.graph_code import code_changed
from .decompositions import CORE_OP_GROUPS, is_core, packet_name
from .functionalize import is_view_op
from .symbolic_inputs import concrete

INF = float("inf")

# Extra weight, as a fraction of its bytes, of saving a tensor that the forward
# would not write otherwise. Small on purpose: bytes held stay the main cost, so
# the cut never saves much more memory to spare a store; the margin only has to
# exceed the per-row statistics that saving the already-written tensor brings
# along (a [rows] mean beside a [rows, cols] matmul output).
STORE_ONLY_FOR_SAVING = 1 / 16

# Weight, as a fraction of its bytes, of recomputing a node in the backward: a few
# arithmetic operations per element, inside a kernel that runs anyway. It only
# breaks ties between cuts of equal bytes; it must stay well below
# STORE_ONLY_FOR_SAVING, which a recomputed ``x - mean`` has to undercut.
RECOMPUTE = 1 / 256

# Ops that read their operands from memory (library calls, and extern ops that
# are not in the core set): a pointwise value feeding one is stored anyway.
_LIBRARY = frozenset(CORE_OP_GROUPS["library"][1])

# Non-pointwise ops that are still cheap to recompute from their inputs.
_CHEAP = frozenset({"_to_copy", "clone", "full", "scalar_tensor", "iota", "arange",
                    "expand", "cat", "constant_pad_nd", "where"})


@dataclasses.dataclass
class Partition:
    forward: torch.fx.GraphModule    # inputs -> forward outputs + saved values
    backward: torch.fx.GraphModule   # saved values + tangents -> gradients
    num_saved: int
    saved_bytes: int


def is_recomputable(node: torch.fx.Node) -> bool:
    if node.target is operator.getitem:
        return True
    op = node.target
    if not isinstance(op, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in op.tags:
        return False
    return torch.Tag.pointwise in op.tags or is_view_op(op) or packet_name(op) in _CHEAP


def tensor_bytes(node: torch.fx.Node) -> float:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return concrete(val.numel()) * val.element_size()  # priced by the hints
    if isinstance(val, (torch.SymInt, torch.SymFloat)):
        return 8  # a symbolic size the backward needs: one number
    return INF  # tuples and scalars cannot be saved; their getitems can


def partition_joint(joint: torch.fx.GraphModule, *, num_inputs: int, num_tangents: int,
                    num_forward_outputs: int) -> Partition:
    graph = joint.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:num_inputs], placeholders[num_inputs:num_inputs + num_tangents]
    output_node = next(n for n in reversed(graph.nodes) if n.op == "output")
    results = list(output_node.args[0])
    fw_outputs, grads = results[:num_forward_outputs], results[num_forward_outputs:]

    needs_tangent = _descendants(tangents)
    bw_ancestors = _ancestors([n for n in grads if n is not None])
    written = _written_by_forward(graph, primals, fw_outputs, needs_tangent)
    saved = _min_cut_saved(primals, bw_ancestors, needs_tangent, written,
                           [n for n in grads if n is not None])

    forward = _extract(joint, primals, fw_outputs + saved)
    backward = _extract(joint, saved + tangents, grads, order_by=needs_tangent)
    return Partition(forward, backward, len(saved), int(sum(tensor_bytes(n) for n in saved)))


def _min_cut_saved(primals, bw_ancestors, needs_tangent, written, grads):
    flow = _FlowNetwork()
    region = [n for n in bw_ancestors if n not in needs_tangent and n.op != "get_attr"]
    primal_set = set(primals)
    for n in region:
        weight = 0.0 if n in primal_set else saving_cost(n, n in written)
        flow.add_edge((n, "in"), (n, "out"), weight)
        if n in primal_set or not is_recomputable(n) or (
                not _aliases_input(n) and _materialized_by_backward(n, needs_tangent)):
            flow.add_edge("source", (n, "in"), INF)
        elif not _aliases_input(n) and RECOMPUTE and tensor_bytes(n) < INF:
            flow.add_edge("source", (n, "in"), tensor_bytes(n) * RECOMPUTE)
        for user in n.users:
            if user in needs_tangent:
                flow.add_edge((n, "out"), "sink", INF)
            elif user in bw_ancestors:
                flow.add_edge((n, "out"), (user, "in"), INF)
    for g in grads:
        if g not in needs_tangent and g.op != "get_attr":
            flow.add_edge((g, "out"), "sink", INF)
    reachable = flow.min_cut_source_side("source", "sink")
    order = {n: i for i, n in enumerate(region)}
    saved = [n for n in region if (n, "in") in reachable and (n, "out") not in reachable]
    return sorted(saved, key=order.__getitem__)


def _materialized_by_backward(node: torch.fx.Node, needs_tangent: set) -> bool:
    """A backward library call reads ``node`` (or a view of it) from memory.

    Recomputing is cheap only inside a kernel that runs anyway; a value that a
    backward matmul reads (a Linear's input, for its weight gradient) would be
    recomputed by a kernel of its own that reads its inputs and writes it again,
    while the forward stores it anyway when a forward library call reads it too.
    Such a value is never recomputed: it is saved, or what it is made of is.
    """
    for user in node.users:
        if user in needs_tangent and _reads_operands_from_memory(user):
            return True
        if _aliases_input(user) and _materialized_by_backward(user, needs_tangent):
            return True
    return False


def saving_cost(node: torch.fx.Node, written_anyway: bool) -> float:
    """What saving ``node`` costs the cut: its bytes, plus a store's worth of
    weight when the forward writes it only to save it."""
    size = tensor_bytes(node)
    return size if written_anyway else size * (1 + STORE_ONLY_FOR_SAVING)


def _written_by_forward(graph: torch.fx.Graph, primals, fw_outputs, needs_tangent) -> set:
    """Nodes whose value the forward has in memory whatever the cut saves.

    Graph inputs, forward outputs, results of ops that are not recomputed (library
    and extern calls, reductions, random ops: their result is stored by the call
    or kernel that makes it), operands of forward library calls (which read them
    from memory), and values the forward reads again after a library call that
    depends on them (no kernel spans the call, so the value waits in memory, as a
    residual stream does across a block's matmuls). A view or getitem shares its
    base's memory, so it is written exactly when its base is. Fused pointwise
    intermediates that only their own kernel and the backward read are not.
    """
    def base(n):
        while isinstance(n, torch.fx.Node) and n.op == "call_function" and _aliases_input(n):
            n = n.args[0]
        return n

    # Work the forward surely runs: what its outputs need, and every node the cut
    # cannot recompute (with what it needs). Other nodes may run in the backward.
    computed = [n for n in graph.nodes
                if n.op == "call_function" and n not in needs_tangent and not is_recomputable(n)]
    in_forward = _ancestors([n for n in fw_outputs if isinstance(n, torch.fx.Node)] + computed)
    bases = {base(n) for n in primals}
    bases.update(base(n) for n in fw_outputs if isinstance(n, torch.fx.Node))
    bases.update(computed)
    library = [n for n in graph.nodes if n in in_forward and _reads_operands_from_memory(n)]
    for call in library:
        bases.update(base(i) for i in call.all_input_nodes)
    bases.update(_read_across_library_calls(graph, in_forward, library))
    return {n for n in graph.nodes if base(n) in bases}


def _read_across_library_calls(graph: torch.fx.Graph, in_forward: set, library: list) -> set:
    """Forward nodes with a forward user that runs after a library call depending on them."""
    bit = {n: 1 << i for i, n in enumerate(library)}
    runs_after: dict = {}    # node -> bitset of library calls it depends on
    for n in graph.nodes:
        if n in in_forward:
            mask = 0
            for i in n.all_input_nodes:
                mask |= runs_after.get(i, 0) | bit.get(i, 0)
            runs_after[n] = mask
    feeds: dict = {}         # node -> bitset of library calls that depend on it
    for n in reversed(graph.nodes):
        if n in in_forward:
            mask = 0
            for u in n.users:
                if u in in_forward:
                    mask |= feeds.get(u, 0) | bit.get(u, 0)
            feeds[n] = mask
    return {n for n in feeds if feeds[n] and any(feeds[n] & runs_after.get(u, 0) for u in n.users)}


def _aliases_input(node: torch.fx.Node) -> bool:
    op = node.target
    return op is operator.getitem or (isinstance(op, torch._ops.OpOverload) and is_view_op(op))


def _reads_operands_from_memory(node: torch.fx.Node) -> bool:
    op = node.target
    return isinstance(op, torch._ops.OpOverload) and (packet_name(op) in _LIBRARY or not is_core(op))


def _descendants(roots) -> set:
    seen, stack = set(), list(roots)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(n.users)
    return seen


def _ancestors(roots) -> set:
    seen, stack = set(), list(roots)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen


def _extract(joint: torch.fx.GraphModule, inputs, outputs, *, order_by=None) -> torch.fx.GraphModule:
    """A graph computing ``outputs`` from ``inputs`` with the joint graph's nodes.

    Nodes keep the joint graph's order, except with ``order_by``: then each node
    of ``order_by`` (in its order) is emitted right after the nodes it needs, so
    work recomputed in the backward happens just before its first use instead of
    all at the start (which would keep every recomputed tensor alive at once).
    """
    needed = _ancestors_until([n for n in outputs if n is not None], set(inputs))
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in inputs:
        env[n] = graph.placeholder(n.name)
        env[n].meta = dict(n.meta)
    attrs = {}

    def emit(root):
        stack = [root]
        while stack:
            n = stack[-1]
            if n in env:
                stack.pop()
                continue
            pending = [i for i in n.all_input_nodes if i not in env]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            env[n] = graph.node_copy(n, env.__getitem__)
            if n.op == "get_attr":
                attrs[n.target] = getattr(joint, n.target)

    drivers = [n for n in joint.graph.nodes if n in needed and n.op != "output"]
    if order_by is not None:
        drivers = [n for n in drivers if n in order_by] + [n for n in outputs if n is not None]
    for n in drivers:
        emit(n)
    graph.output(tuple(env[n] if n is not None else None for n in outputs))
    return torch.fx.GraphModule(attrs, graph)


def _ancestors_until(roots, stop: set) -> set:
    seen, stack = set(), list(roots)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in stop:
            stack.extend(n.all_input_nodes)
    return seen


class _FlowNetwork:
    """Max-flow (Dinic) on a small directed graph, for the min cut above."""

    def __init__(self):
        self.adj: dict = collections.defaultdict(list)   # vertex -> [edge ids]
        self.head: list = []
        self.cap: list[float] = []

    def add_edge(self, u, v, capacity: float) -> None:
        self.adj[u].append(len(self.head))
        self.head.append(v)
        self.cap.append(capacity)
        self.adj[v].append(len(self.head))
        self.head.append(u)
        self.cap.append(0.0)

    def _levels(self, s, t):
        level = {s: 0}
        queue = collections.deque([s])
        while queue:
            u = queue.popleft()
            for e in self.adj[u]:
                v = self.head[e]
                if self.cap[e] > 0 and v not in level:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level if t in level else None

    def _push(self, s, t, level, cursor) -> float:
        # Iterative DFS for one augmenting path in the level graph.
        path, u = [], s
        while True:
            if u == t:
                amount = min(self.cap[e] for e in path)
                for e in path:
                    self.cap[e] -= amount
                    self.cap[e ^ 1] += amount
                return amount
            edges = self.adj[u]
            advanced = False
            while cursor[u] < len(edges):
                e = edges[cursor[u]]
                v = self.head[e]
                if self.cap[e] > 0 and level.get(v) == level[u] + 1:
                    path.append(e)
                    u = v
                    advanced = True
                    break
                cursor[u] += 1
            if not advanced:
                if not path:
                    return 0.0
                level[u] = -1  # dead end: prune it
                e = path.pop()
                u = self.head[e ^ 1]
                cursor[u] += 1

    def min_cut_source_side(self, s, t) -> set:
        if s not in self.adj or t not in self.adj:
            return set(self.adj) - {t}
        while True:
            level = self._levels(s, t)
            if level is None:
                break
            cursor = collections.defaultdict(int)
            while True:
                pushed = self._push(s, t, level, cursor)
                if pushed == 0:
                    break
                if pushed == INF:
                    raise AssertionError("partitioner: no finite cut between forward and backward")
        seen, stack = {s}, [s]
        while stack:
            u = stack.pop()
            for e in self.adj[u]:
                v = self.head[e]
                if self.cap[e] > 0 and v not in seen:
                    seen.add(v)
                    stack.append(v)
        return seen


def prune_unused_saved(forward: torch.fx.GraphModule, backward: torch.fx.GraphModule, *,
                       num_values: int) -> None:
    """Drop saved values the (optimized) backward no longer reads, from both graphs."""
    placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
    output = next(n for n in reversed(forward.graph.nodes) if n.op == "output")
    results = list(output.args[0])
    saved = results[num_values:]
    keep = [i for i, p in enumerate(placeholders[: len(saved)]) if p.users]
    if len(keep) == len(saved):
        return
    for p in placeholders[: len(saved)]:
        if not p.users:
            backward.graph.erase_node(p)
    output.args = (tuple(results[:num_values] + [saved[i] for i in keep]),)
    # Random ops stay: removing one would shift the RNG stream of later ones.
    eliminate_dead_code(forward, keep_random=True)
    code_changed(backward)
