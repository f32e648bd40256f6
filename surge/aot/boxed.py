"""Boxed calling convention: a compiled graph that may free its inputs as it runs.

A callable with ``boxed_call = True`` (or a ``call_boxed(args)`` method, as
surge's compiled graphs have) takes one list of arguments and may clear it. The runtime hands the backward its saved tensors that way, so each saved
tensor is freed right after its last use in the backward instead of living until
the backward returns. Compilers may return either convention.
"""
from __future__ import annotations

import copy
from typing import Callable

import torch
import torch.fx


class _BoxedCodeGen(torch.fx.graph.CodeGen):
    """Generates ``def forward(self, args): a, b = args; args.clear() ...``."""

    def gen_fn_def(self, free_vars, maybe_return_annotation, *, expanded_def=False):
        names = [v.split(":")[0].strip() for v in free_vars if v.split(":")[0].strip() != "self"]
        unpack = f"    {', '.join(names)}, = args\n    args.clear()" if names else "    args.clear()"
        return f"def {self._func_name}(self, args){maybe_return_annotation}:\n{unpack}"


def boxed_graph_runner(gm: torch.fx.GraphModule) -> Callable:
    """Run ``gm`` as it is, in the boxed convention (its generated code drops
    each input after its last use)."""
    graph = copy.deepcopy(gm.graph)
    graph.set_codegen(_BoxedCodeGen())
    runner = torch.fx.GraphModule(gm, graph)
    return _Boxed(runner.forward)


class _Boxed:
    boxed_call = True

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, args: list):
        return self.fn(args)


def call_compiled(fn: Callable, args: list):
    """Call a compiled graph in whichever convention it uses; ``args`` is consumed.
    Surge's own compiled graphs take the list through ``call_boxed``."""
    if getattr(fn, "boxed_call", False):
        return fn(args)
    boxed = getattr(fn, "call_boxed", None)
    if boxed is not None:
        return boxed(args)
    return fn(*args)
