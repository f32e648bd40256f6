"""Shared helpers of the aot tests: build graphs, compile with aot_eager, compare with eager."""
from __future__ import annotations

import operator

import torch
import torch.fx

from surge.aot import aot_compile
from surge.aot.backend import run_graph
from surge.options import Options


def compile_aot(fn_or_module, example_inputs, *, options=None, record=None, boxed=False):
    """symbolic_trace + aot_compile with graph-running compilers.

    ``record`` (a dict) receives the list of ATen graphs handed to the compilers
    under "graphs", so that tests can check structure. ``boxed`` runs them as
    aot_eager does (boxed calls); otherwise through plain ``gm.forward``.
    """
    gm = fn_or_module if isinstance(fn_or_module, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn_or_module)
    calls = []

    def compiler(aten_gm, inputs):
        calls.append(aten_gm)
        return run_graph(aten_gm, inputs) if boxed else aten_gm.forward

    compiled = aot_compile(gm, example_inputs, fw_compiler=compiler, bw_compiler=compiler,
                           options=options or Options(raise_internal_errors=True))
    if record is not None:
        record["graphs"] = calls
    return compiled


def single_op_graph(target, args, kwargs) -> tuple[torch.fx.GraphModule, list]:
    """A torch-level graph calling ``target`` once; tensor leaves become placeholders."""
    from torch.utils import _pytree as pytree

    flat, spec = pytree.tree_flatten((args, kwargs))
    graph = torch.fx.Graph()
    inputs, node_flat = [], []
    for i, leaf in enumerate(flat):
        if isinstance(leaf, torch.Tensor):
            node_flat.append(graph.placeholder(f"arg{i}"))
            inputs.append(leaf)
        else:
            node_flat.append(leaf)
    node_args, node_kwargs = pytree.tree_unflatten(node_flat, spec)
    out = graph.call_function(target, tuple(node_args), node_kwargs)
    graph.output(out)
    return torch.fx.GraphModule(torch.nn.Module(), graph), inputs


def call_targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def inplace_nodes(gm: torch.fx.GraphModule) -> list:
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is not operator.getitem:
            if any(a.alias_info is not None and a.alias_info.is_write for a in n.target._schema.arguments):
                out.append(n)
    return out


def assert_close_tree(actual, expected, **tol):
    from torch.utils import _pytree as pytree

    a_flat, a_spec = pytree.tree_flatten(actual)
    e_flat, e_spec = pytree.tree_flatten(expected)
    assert a_spec == e_spec, f"output structure differs: {a_spec} vs {e_spec}"
    for a, e in zip(a_flat, e_flat):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor)
            assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, e.shape, a.dtype, e.dtype)
            torch.testing.assert_close(a, e, **tol)
        else:
            assert a == e
