"""Which form a graph with symbolic sizes is compiled in by a kernel backend.

A graph whose sizes are symbolic (SymInt placeholders, tensors with symbolic shapes:
from surge's frontend, or Dynamo's under ``torch.compile(f, backend=surge.backend)``)
is compiled once for every size (``compile_symbolic``): surge's own symbols go straight
to aot and lowering, Dynamo's are rebuilt on surge's shape environment first
(``foreign_sizes.py``). Where that cannot be done, the graph is compiled per set of
concrete sizes, at its first call with them (``SpecializedPerSizes``), with one line
under ``SURGE_LOGS=dynamic`` saying why: an op whose lowering needs static sizes
(``NeedsStaticSizes``), or Dynamo sizes surge has no form for. Such a copy of the graph
has the number placeholders as constants and its tensor placeholders' traced values
made concrete; calls are keyed by every tensor's shape, stride, dtype and device and by
the numbers, so a compiled graph only ever runs on the inputs it was compiled for.
"""
from __future__ import annotations

import torch
import torch.fx

from .. import logs
from ..counters import counters


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


def compile_symbolic(gm: torch.fx.GraphModule, example_inputs, compile_graph, compile_static):
    """``gm`` compiled for symbolic sizes by ``compile_graph(gm, inputs)``, or per sizes by
    ``compile_static`` where it cannot be."""
    from ..errors import NeedsStaticSizes
    from .foreign_sizes import ForeignSizes, NotImportable, has_foreign_sizes

    try:
        if has_foreign_sizes(gm, example_inputs):
            return ForeignSizes(gm, example_inputs, compile_graph)
        return compile_graph(gm, example_inputs)
    except (NeedsStaticSizes, NotImportable) as why:
        logs.log("dynamic", f"the graph is compiled per concrete sizes: {why}")
        counters["static_fallbacks"] += 1
        return SpecializedPerSizes(gm, compile_static)


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
        for node, i in zip((n for n in graph.nodes if n.op == "placeholder"), tensor_positions):
            real = args[i]   # the traced value of this call's tensor: no symbolic sizes left
            node.meta["val"] = torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device="meta")
            node.meta["device"] = real.device
        logs.log("dynamic", f"a graph with symbolic sizes compiled for the sizes {_describe(args)}")
        return self.compile_static(static, [args[i] for i in tensor_positions]), tensor_positions


def _key(value):
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.stride(), value.dtype, value.device, value.requires_grad)
    return (type(value), value)


def _describe(args) -> str:
    """The sizes a call has: its numbers, else its first tensors' shapes."""
    numbers = [repr(a) for a in args if not isinstance(a, torch.Tensor)]
    if numbers:
        return ", ".join(numbers)
    shapes = [str(list(a.shape)) for a in args if isinstance(a, torch.Tensor)]
    return ", ".join(shapes[:3]) + (", ..." if len(shapes) > 3 else "")
