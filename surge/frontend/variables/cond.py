"""``torch.cond(pred, true_fn, false_fn, operands)``: both branches as subgraphs.

With a tensor predicate, each branch is traced on its own into a subgraph whose
placeholders are the operands; tensors of the enclosing graph that a branch reads
(closures, globals, module parameters) are lifted into extra operands shared by both
subgraphs. The enclosing graph gets what TorchDynamo emits, so any torch.compile
backend can run it: two ``get_attr`` submodules and one node
``torch.ops.higher_order.cond(pred, cond_true_0, cond_false_0, (operands...))``
returning a tuple, unpacked by ``getitem``. How surge's own backends run that node is
the aot layer's business (``aot/cond.py``).

A Python predicate (a constant) inlines the branch it picks. Branches must be pure
functions of their operands: anything else a branch does (a side effect, a graph
break, outputs that differ in structure or metadata, an output that is an operand)
makes the call a graph break, where CPython runs ``torch.cond`` and raises eager's
error.
"""
from __future__ import annotations

import torch

from ..graph_builder import GraphBuilder
from .base import Variable, unsupported
from .containers import ListVariable, TupleVariable
from .tensor import TensorVariable, wrap_result
from .torch_fns import torch_rule
from .torch_function import is_overriding

COND = torch.ops.higher_order.cond


class BranchGraphBuilder(GraphBuilder):
    """The graph of one branch: its own ops; graph inputs it reads stay inputs of the
    enclosing graph (lifted afterwards)."""

    def __init__(self, outer: GraphBuilder):
        super().__init__()
        self.outer = outer
        self.inputs = outer.inputs

    def placeholder(self, source, real, name_hint):
        return self.outer.placeholder(source, real, name_hint)


@torch_rule(torch.cond)
def _cond(tx, fn, args, kwargs):
    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if set(bound) - set(names) or len(bound) < 3:
        unsupported("torch.cond() with arguments other than (pred, true_fn, false_fn, operands)")
    pred, true_fn, false_fn = bound["pred"], bound["true_fn"], bound["false_fn"]
    operands = bound.get("operands", TupleVariable([]))
    if not isinstance(operands, (TupleVariable, ListVariable)) or \
            not all(isinstance(o, TensorVariable) for o in operands.items):
        unsupported("torch.cond() operands that are not a tuple or list of tensors")
    if any(is_overriding(v) for v in [pred, *operands.items]):
        # Eager torch.cond refuses tensor subclasses with __torch_function__: CPython raises it.
        unsupported("torch.cond() with a tensor subclass that overrides __torch_function__")
    if pred.is_constant():
        branch = true_fn if pred.as_constant() else false_fn
        return branch.call(tx, list(operands.items), {})
    if not isinstance(pred, TensorVariable) or pred.example.numel() != 1:
        unsupported("torch.cond() with a predicate that is neither a Python value nor a one-element tensor")
    branches = [_trace_branch(tx, f, operands.items, which) for f, which in ((true_fn, "true"), (false_fn, "false"))]
    _check_alike(branches)
    inputs = list(operands.items)  # what every subgraph takes, in order: operands, then lifted tensors
    for branch in branches:
        for lifted in branch.lifted:
            if not any(lifted.node is i.node for i in inputs):
                inputs.append(lifted)
    for branch in branches:
        branch.take_inputs(inputs)
    outer = tx.graph
    index = sum(1 for name in outer.submodules if name.startswith("cond_true_"))
    attrs = []
    for branch in branches:
        name = f"cond_{branch.which}_{index}"
        outer.submodules[name] = branch.graph_module()
        attrs.append(outer.create_node("get_attr", name, (), {}, tx.stack_trace()))
    node = outer.create_node("call_function", COND, (pred.node, *attrs, tuple(i.node for i in inputs)), {},
                             tx.stack_trace())
    first = branches[0]
    result = wrap_result(tx, node, tuple(t.example for t in first.outputs), first.outputs[0].device)
    return first.rebuild(result.items)


class _Branch:
    def __init__(self, which: str, builder: BranchGraphBuilder, operands: list, outputs: list, structure):
        self.which = which
        self.builder = builder
        self.graph = builder.graph
        self.outputs = outputs          # TensorVariables (of the branch graph or lifted)
        self.structure = structure      # None (one tensor), or the list/tuple type
        # Placeholders by what they stand for: operand index, or an enclosing graph node.
        self.by_input: dict = {}
        self.lifted: list = []
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        for i, node in enumerate(placeholders):
            self.by_input[("operand", i)] = node
        self._operands = operands
        self._lift()

    def _lift(self) -> None:
        """Enclosing-graph nodes a branch op reads become placeholders of the branch."""
        for node in list(self.graph.nodes):
            for used in list(node.all_input_nodes):
                if used.graph is self.graph:
                    continue
                key = ("outer", used)
                if key not in self.by_input:
                    with self.graph.inserting_before(next(iter(self.graph.nodes))):
                        ph = self.graph.placeholder(f"lifted_{len(self.lifted)}")
                    ph.meta.update({k: used.meta[k] for k in ("val", "device") if k in used.meta})
                    self.by_input[key] = ph
                    self.lifted.append(_LiftedValue(used))
                node.replace_input_with(used, self.by_input[key])
        if any(n.op == "placeholder" for n in self.graph.output_node().all_input_nodes):
            unsupported(f"the {self.which} branch of torch.cond() returns one of its inputs (aliasing)")

    def take_inputs(self, inputs: list) -> None:
        """Placeholders in the order ``inputs`` (shared by both branches), unused ones added."""
        first = next(n for n in self.graph.nodes if n.op != "placeholder")
        for i, value in enumerate(inputs):
            key = ("operand", i) if i < len(self._operands) else ("outer", value.node)
            old = self.by_input.get(key)
            with self.graph.inserting_before(first):
                new = self.graph.placeholder(f"arg{i}")
            new.meta.update({"val": value.example, "device": value.device})
            if old is not None:
                old.replace_all_uses_with(new)
                self.graph.erase_node(old)
        self.graph.lint()

    def graph_module(self) -> torch.fx.GraphModule:
        root = torch.nn.Module()
        for name, module in self.builder.submodules.items():  # its own nested conds
            root.add_module(name, module)
        return torch.fx.GraphModule(root, self.graph, class_name="SurgeCondBranch")

    def rebuild(self, items: list) -> Variable:
        if self.structure is None:
            return items[0]
        if self.structure is list:
            return ListVariable(list(items))
        return TupleVariable(list(items))


class _LiftedValue:
    """An enclosing-graph value a branch read (only its node and metadata are needed)."""

    def __init__(self, node):
        self.node = node
        self.example = node.meta["val"]
        self.device = node.meta.get("device")


def _trace_branch(tx, fn: Variable, operands: list, which: str) -> _Branch:
    outer = tx.graph
    sub = BranchGraphBuilder(outer)
    stores_before = (dict(tx.side_effects._stores), dict(tx.side_effects._containers))
    tx.graph = sub
    try:
        inner = []
        for i, operand in enumerate(operands):
            node = sub.graph.placeholder(f"operand_{i}")
            node.meta.update({"val": operand.example, "device": operand.device})
            inner.append(TensorVariable(node, operand.example, operand.device))
        result = fn.call(tx, inner, {})
    finally:
        tx.graph = outer
    if (tx.side_effects._stores, tx.side_effects._containers) != stores_before:
        unsupported(f"the {which} branch of torch.cond() has side effects")
    if isinstance(result, TensorVariable):
        outputs, structure = [result], None
    elif isinstance(result, (TupleVariable, ListVariable)) and result.items and \
            all(isinstance(r, TensorVariable) for r in result.items):
        outputs, structure = list(result.items), list if isinstance(result, ListVariable) else tuple
    else:
        unsupported(f"the {which} branch of torch.cond() returns {result}, not tensors")
    sub.graph.output(tuple(o.node for o in outputs))
    return _Branch(which, sub, list(operands), outputs, structure)


def _check_alike(branches) -> None:
    true, false = branches
    if true.structure is not false.structure or len(true.outputs) != len(false.outputs):
        unsupported("the branches of torch.cond() return different structures")
    for a, b in zip(true.outputs, false.outputs):
        if a.example.shape != b.example.shape or a.example.dtype != b.example.dtype or a.device != b.device:
            unsupported("the branches of torch.cond() return tensors of different shape, dtype or device")

