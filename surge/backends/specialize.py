"""Graphs with symbolic sizes for backends that take static sizes only.

Dynamo (``torch.compile(f, backend=surge.backend)``) hands a backend graphs whose
sizes are symbolic once a size changed: SymInt placeholders and fake tensors
with symbolic shapes, of Dynamo's own shape environment. Until lowering takes
symbolic sizes (``accepts_symbolic_sizes`` on the kernel backends), such a graph
is compiled per set of concrete sizes, at its first call with them: the number
placeholders become constants of a copy of the graph, which the backend compiles
for the call's real tensors. Calls are keyed by every tensor's shape, stride,
dtype and device and by the numbers, so a compiled graph only ever runs on the
inputs it was compiled for.
"""
from __future__ import annotations

import torch
import torch.fx

from .. import logs


def has_symbolic_inputs(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether a graph takes sizes or numbers as inputs. A number that is a graph input is
    symbolic by construction (a static one would be a constant of the graph), whether its
    example is a SymInt (Dynamo) or the plain value (a capture made for a backend wrapper
    that takes symbolic graphs and hands them on to a kernel backend)."""
    for value in example_inputs:
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
            return True
        if isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in value.shape):
            return True
    return False


class SpecializedPerSizes:
    """Compiles ``gm`` with ``compile_static(gm, inputs)`` once per distinct input layout."""

    def __init__(self, gm: torch.fx.GraphModule, compile_static):
        self.gm = gm
        self.compile_static = compile_static
        self.compiled: dict = {}

    def __call__(self, *args):
        key = tuple(_key(a) for a in args)
        found = self.compiled.get(key)
        if found is None:
            found = self.compiled[key] = self._compile(args)
        runner, tensor_positions = found
        return runner(*[args[i] for i in tensor_positions])

    def _compile(self, args):
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        graph = torch.fx.Graph()
        constants, tensor_positions = {}, []
        for i, (node, value) in enumerate(zip(placeholders, args)):
            if isinstance(value, torch.Tensor):
                tensor_positions.append(i)
            else:
                constants[node] = value
        values = dict(constants)
        out = graph.graph_copy(self.gm.graph, values)
        graph.output(out)
        static = torch.fx.GraphModule(self.gm, graph)
        logs.log("dynamic", f"a graph with symbolic sizes compiled for the sizes {_describe(args)} "
                            "(the backend takes static sizes only)")
        return self.compile_static(static, [args[i] for i in tensor_positions]), tensor_positions


def _key(value):
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.stride(), value.dtype, value.device, value.requires_grad)
    return (type(value), value)


def _describe(args) -> str:
    return ", ".join(str(list(a.shape)) if isinstance(a, torch.Tensor) else repr(a) for a in args)
