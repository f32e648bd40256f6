"""Run a torch-level FX graph on tracer tensors and collect a functional ATen graph.

``trace_program`` is the one entry used by inference tracing, joint
(forward+backward) tracing and ``trace_aten``. Its result, ``TracedProgram``, is a
functional graph plus what the runtime needs to rebuild eager's observable
behaviour around it:

- graph inputs: the torch-level placeholders, then the parameters, buffers and
  tensor attributes of the module (*lifted state*, so that gradients reach them
  and buffer updates are copied back into them);
- graph outputs, in this order: new values of mutated inputs, then the values the
  graph computes, then (joint graphs) the gradients of the inputs requiring grad;
- ``OutputSpec`` per user output: computed by the graph, or a view of an input /
  of another output / of a constant that the runtime replays on real tensors, or
  a Python constant.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch
import torch.fx
from torch.amp.autocast_mode import _enter_autocast, _exit_autocast
from torch.utils import _pytree as pytree

from ..errors import Unsupported
from ..frontend.size_node import is_symbolic
from ..frontend.symbolic_meta import symbolic_meta
from .data_dependent_sizes import graph_has_data_dependent_sizes
from .cond import COND, trace_cond
from .device_layouts import ChannelsLastConvolutions
from .functionalize import ViewStep
from .symbolic_inputs import bind_chain, symbolic_placeholder_meta
from .tracer import AtenTracer, TracerTensor


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """How the runtime produces one (flattened) user output."""

    kind: str                # "graph" | "input_view" | "output_view" | "constant_view" | "constant"
    index: int = -1          # graph-output index ("graph", "output_view") or input index
    chain: tuple[ViewStep, ...] = ()
    value: Any = None        # the constant ("constant"), or the real tensor a view is of


@dataclasses.dataclass
class TracedProgram:
    graph_module: torch.fx.GraphModule
    num_user_inputs: int
    state_names: list[str]              # lifted state, graph inputs after the user's
    mutated_inputs: list[int]           # input indices; their new values lead the outputs
    num_values: int                     # graph outputs after the mutated-input values
    outputs: list[OutputSpec]
    out_spec: Any                       # pytree spec of the user's outputs
    value_requires_grad: list[bool]     # per computed value: differentiable in eager
    grad_inputs: list[int]              # input indices whose gradients end the outputs
    input_names: list[str]              # graph input node names (placeholder or get_attr)
    user_output_nodes: list[Any]        # per flattened user output: its node, or the constant
    num_tangents: int = 0

    @property
    def num_inputs(self) -> int:
        return self.num_user_inputs + len(self.state_names)


def module_state(gm: torch.nn.Module) -> list[tuple[list[str], torch.Tensor]]:
    """Parameters, buffers and tensor attributes read by get_attr, deduplicated."""
    by_id: dict[int, tuple[list[str], torch.Tensor]] = {}
    named = list(gm.named_parameters(remove_duplicate=False)) + list(gm.named_buffers(remove_duplicate=False))
    for node in getattr(gm, "graph", torch.fx.Graph()).nodes:
        if node.op == "get_attr":
            value = _fetch(gm, node.target)
            if isinstance(value, torch.Tensor):
                named.append((node.target, value))
    for name, value in named:
        entry = by_id.setdefault(id(value), ([], value))
        if name not in entry[0]:
            entry[0].append(name)
    return list(by_id.values())


def _fetch(root, qualified: str):
    obj = root
    for part in qualified.split("."):
        obj = getattr(obj, part)
    return obj


@contextlib.contextmanager
def _swapped_state(gm: torch.nn.Module, replacement: dict[str, Any]):
    """Temporarily put tracer tensors where the module keeps its parameters/buffers."""
    undo = []
    try:
        for qualified, value in replacement.items():
            owner_path, _, leaf = qualified.rpartition(".")
            owner = _fetch(gm, owner_path) if owner_path else gm
            for table in ("_parameters", "_buffers"):
                d = owner.__dict__.get(table)
                if d is not None and leaf in d:
                    undo.append((d, leaf, d[leaf]))
                    d[leaf] = value
                    break
        yield
    finally:
        for d, leaf, old in reversed(undo):
            d[leaf] = old


class _TorchLevelInterpreter(torch.fx.Interpreter):
    """Runs the torch-level graph, tagging each ATen node with its source node."""

    def __init__(self, gm, tracer: AtenTracer, state_by_name: dict[str, Any],
                 layouts: ChannelsLastConvolutions | None):
        super().__init__(gm, garbage_collect_values=True)
        self.tracer = tracer
        self.state_by_name = state_by_name
        self.layouts = layouts
        # Autocast modes the graph's _enter_autocast nodes opened and has not closed yet.
        self.open_autocast: list = []

    def run_node(self, n):
        self.tracer.provenance = {"source_node": n.name}
        if n.meta.get("stack_trace"):
            self.tracer.provenance["stack_trace"] = n.meta["stack_trace"]
        try:
            return super().run_node(n)
        except Unsupported as e:
            if e.location is None:
                raise Unsupported(e.reason, _user_location(n)) from None
            raise
        except Exception as e:  # noqa: BLE001
            # Whatever else stops tracing (a torch check that reads data, a
            # decomposition that cannot run on tracer tensors) is reported the
            # same way: the backend then runs this graph eagerly, where a genuine
            # error of the program surfaces as eager's own error.
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise Unsupported(f"tracing failed: {type(e).__name__}: {first}", _user_location(n)) from e

    def call_function(self, target, args, kwargs):
        if target is COND:
            return trace_cond(self.run_subgraph, *args, **kwargs)
        if target is _exit_autocast and args[0] in self.open_autocast:
            self.open_autocast.remove(args[0])
        if target is _enter_autocast:
            mode = super().call_function(target, args, kwargs)
            self.open_autocast.append(mode)
            return mode
        if self.layouts is not None:
            args = self.layouts.arguments(target, args)
        recurrent = _RECURRENT_LAYERS.get(target)
        if recurrent is not None:
            # The CPU kernels of these layers (mkldnn_rnn_layer) skip the workspace
            # the backward needs when grad is off, as it is inside a compiled
            # forward: trace torch's decomposition into cell math instead.
            from .decompositions import _torch_table
            # the packed-sequence overload (.data) takes batch_sizes: params come 4th
            packed = len(args) > 3 and isinstance(args[3], (list, tuple))
            overload = recurrent.data if packed else recurrent.input
            body = _torch_table().get(overload)
            if body is not None:
                mkldnn = torch._C._get_mkldnn_enabled()
                torch._C._set_mkldnn_enabled(False)  # else the body picks that op again
                try:
                    return body(*args, **kwargs)
                finally:
                    torch._C._set_mkldnn_enabled(mkldnn)
        return super().call_function(target, args, kwargs)

    def run_subgraph(self, gm, args) -> tuple:
        """A subgraph of this graph (a torch.cond branch), traced into the same ATen graph."""
        return tuple(_TorchLevelInterpreter(gm, self.tracer, {}, self.layouts).run(*args))

    def close_open_autocast(self) -> None:
        """A trace that stopped inside an autocast region must not leave autocast on."""
        while self.open_autocast:
            self.open_autocast.pop().__exit__(None, None, None)

    def get_attr(self, target, args, kwargs):
        if target in self.state_by_name:
            return self.state_by_name[target]
        return super().get_attr(target, args, kwargs)


# torch.nn's recurrent layers call these: they decompose above the tracer, on
# CPU into an op whose forward depends on grad mode.
_RECURRENT_LAYERS = {
    torch._VF.lstm: torch.ops.aten.lstm,
    torch._VF.gru: torch.ops.aten.gru,
    torch._VF.rnn_tanh: torch.ops.aten.rnn_tanh,
    torch._VF.rnn_relu: torch.ops.aten.rnn_relu,
}


def _user_location(node) -> str | None:
    trace = node.meta.get("stack_trace")
    if trace:
        lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().startswith("File ")]
        if lines:
            return lines[-1]
    return f"graph node {node.name} ({node.format_node()})"


def trace_program(gm: torch.fx.GraphModule, example_inputs, *, decompose: bool = True,
                  lift_state: bool = True, grad_inputs: list[bool] | None = None,
                  device_layouts: bool = False) -> TracedProgram:
    """Trace ``gm`` to a functional ATen graph; joint forward+backward with ``grad_inputs``.

    ``grad_inputs`` (one flag per graph input, lifted state included) names the
    inputs that require grad; then the backward is traced too. ``device_layouts``:
    lay activations out as the device computes them fastest (``ChannelsLastConvolutions``),
    for code-generating backends; eager's layouts otherwise.
    """
    if device_layouts and ChannelsLastConvolutions.applies(gm, example_inputs, module_state(gm)):
        try:
            return _trace(gm, example_inputs, decompose, lift_state, grad_inputs, ChannelsLastConvolutions())
        except Unsupported:
            pass   # e.g. a .view() that needs eager's contiguous layout: trace with eager's layouts
    return _trace(gm, example_inputs, decompose, lift_state, grad_inputs, None)


def _trace(gm, example_inputs, decompose, lift_state, grad_inputs, layouts) -> TracedProgram:
    tracer = AtenTracer(decompose=decompose)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise Unsupported(f"graph has {len(placeholders)} inputs, got {len(example_inputs)} example inputs")
    state = module_state(gm)
    flags = list(grad_inputs) if grad_inputs is not None else [False] * (len(placeholders) + len(state))
    tracers = [tracer.add_input(p.name, v, requires_grad=flags[i], symbolic=symbolic_placeholder_meta(p))
               for i, (p, v) in enumerate(zip(placeholders, example_inputs))]
    state_by_name: dict[str, Any] = {}
    state_names = []
    for j, (names, value) in enumerate(state):
        attr = "state_" + names[0].replace(".", "_")
        t = tracer.add_input(attr, value, requires_grad=flags[len(placeholders) + j], as_attr=not lift_state)
        tracers.append(t)
        state_names.append(names[0])
        for name in names:
            state_by_name[name] = t
    grad_enabled = torch.is_grad_enabled()
    interpreter = _TorchLevelInterpreter(gm, tracer, state_by_name, layouts)
    tracer.data_dependent_env = graph_has_data_dependent_sizes(gm)
    try:
        sizes = symbolic_meta() if tracer.symbols.active or tracer.data_dependent_env else contextlib.nullcontext()
        oblivious = tracer.data_dependent_env.size_oblivious() if tracer.data_dependent_env else contextlib.nullcontext()
        with sizes, oblivious, _swapped_state(gm, state_by_name), tracer.mode, torch.set_grad_enabled(grad_inputs is not None):
            try:
                result = interpreter.run(*tracers[: len(placeholders)])
            finally:
                interpreter.close_open_autocast()
            flat, out_spec = pytree.tree_flatten(result)
            if layouts is not None:
                flat = [layouts.output(v) if isinstance(v, TracerTensor) else v for v in flat]
            outputs, values = _classify_outputs(tracer, flat)
            user_output_nodes = [tracer.current_node(v) if isinstance(v, TracerTensor) else v for v in flat]
            value_requires_grad = [bool(v.requires_grad) and _differentiable(v) for v in values]
            grads, num_tangents = [], 0
            if grad_inputs is not None:
                from .joint import trace_backward

                wanted = [t for t, f in zip(tracers, flags) if f]
                grads, num_tangents = trace_backward(
                    tracer, [v for v, rg in zip(values, value_requires_grad) if rg], wanted)
                if layouts is not None:
                    grads = [layouts.gradient(g, t) for g, t in zip(grads, wanted)]
    finally:
        torch.set_grad_enabled(grad_enabled)
    mutated = [i for i, s in tracer.input_storages.items() if s.version > 0]
    _check_mutated_inputs(mutated, tracers, [v for _, v in tracer.inputs])
    result_nodes = ([tracer.input_storages[i].base_node for i in mutated]
                    + [tracer.current_node(v) for v in values]
                    + [tracer.current_node(g) if g is not None else None for g in grads])
    tracer.graph.output(tuple(result_nodes))
    graph_module = torch.fx.GraphModule(_attributes(tracer), tracer.graph)
    return TracedProgram(
        graph_module=graph_module, num_user_inputs=len(placeholders),
        state_names=state_names if lift_state else [], mutated_inputs=mutated,
        num_values=len(values), outputs=outputs, out_spec=out_spec,
        value_requires_grad=value_requires_grad,
        grad_inputs=[i for i, f in enumerate(flags) if f], num_tangents=num_tangents,
        input_names=[node.name for node, _ in tracer.inputs], user_output_nodes=user_output_nodes,
    )


def insert_copy_back(gm: torch.fx.GraphModule, mutated: list[int], input_names: list[str]) -> None:
    """Turn the leading ``len(mutated)`` outputs into ``copy_`` into their inputs.

    This is the one in-place op of a surge ATen graph: the mutated inputs'
    final values, copied back once, after everything else.
    """
    if not mutated:
        return
    by_name = {n.name: n for n in gm.graph.nodes if n.op in ("placeholder", "get_attr")}
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    results = list(output.args[0])
    with gm.graph.inserting_before(output):
        for i, value in zip(mutated, results[: len(mutated)]):
            target = by_name[input_names[i]]
            copy = gm.graph.call_function(torch.ops.aten.copy_.default, (target, value))
            copy.meta = dict(target.meta)
    output.args = (tuple(results[len(mutated):]),)
    from ..passes.graph_code import code_changed   # compile-time only: warm calls import no passes
    code_changed(gm)


def _is_base(owner) -> bool:
    # The tensor that was the storage's base, if it still is (a metadata
    # mutation such as ``t_()`` can have turned it into a view since).
    return owner is not None and not owner._alias.chain


def _check_mutated_inputs(mutated: list[int], tracers: list, values: list) -> None:
    storages: dict[int, int] = {}
    for v in values:
        if isinstance(v, torch.Tensor) and v.numel() > 0:
            ptr = v.untyped_storage().data_ptr()
            storages[ptr] = storages.get(ptr, 0) + 1
    for i in mutated:
        if isinstance(tracers[i], TracerTensor) and tracers[i].grad_fn is not None:
            # Autograd recorded the update (grad was on): eager would rebase the
            # input's history, which a compiled region cannot do to its input.
            raise Unsupported(f"in-place update of graph input {i}, which requires grad, "
                              "is not supported in a compiled training graph")
        if values[i].numel() > 0 and storages.get(values[i].untyped_storage().data_ptr(), 0) > 1:
            # Functionalization treats inputs as separate storages: a write
            # through one would not be seen through the other.
            raise Unsupported(f"graph input {i} is updated in place and shares memory with another input")


def _differentiable(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


def _attributes(tracer: AtenTracer) -> dict[str, Any]:
    attrs = dict(tracer.constants)
    for node, value in tracer.inputs:
        if node.op == "get_attr":
            attrs[node.target] = value
    return attrs


def _classify_outputs(tracer: AtenTracer, flat: list) -> tuple[list[OutputSpec], list[TracerTensor]]:
    """Decide how each user output is produced; returns specs and the computed values."""
    storage_uses: dict[int, int] = {}
    for v in flat:
        if isinstance(v, TracerTensor):
            storage_uses[id(v._alias.storage)] = storage_uses.get(id(v._alias.storage), 0) + 1
    values: list[TracerTensor] = []
    value_index: dict[int, int] = {}   # node / storage id -> computed value index

    def value_slot(key: int, tensor: TracerTensor) -> int:
        if key not in value_index:
            value_index[key] = len(values)
            values.append(tensor)
        return value_index[key]

    specs = []
    for v in flat:
        if is_symbolic(v):
            raise Unsupported("a graph output is a symbolic size (the frontend rebuilds those itself)")
        if not isinstance(v, torch.Tensor):
            specs.append(OutputSpec("constant", value=v))
            continue
        if not isinstance(v, TracerTensor):
            specs.append(OutputSpec("constant", value=v))
            continue
        # The runtime replays output views on real tensors: symbolic arguments are
        # computed from the call's size inputs then.
        storage, chain = v._alias.storage, bind_chain(v._alias.chain, tracer)
        if storage.input_index is not None:
            specs.append(OutputSpec("input_view", index=storage.input_index, chain=chain))
        elif storage.constant:
            specs.append(OutputSpec("constant_view", chain=chain,
                                    value=tracer.constants[storage.base_node.target]))
        elif storage_uses[id(storage)] > 1 and _is_base(storage.owner):
            # Several outputs share one intermediate storage: return its base once
            # and replay each view on it, so they alias each other as in eager.
            specs.append(OutputSpec("output_view", index=value_slot(id(storage), storage.owner),
                                    chain=chain))
        else:
            specs.append(OutputSpec("graph", index=value_slot(id(tracer.current_node(v)), v)))
    return specs, values
