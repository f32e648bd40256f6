"""Helpers of the frontend's own tests: a recording backend and eager comparison."""
from __future__ import annotations

import torch

import surge


class Recorder:
    """A backend that keeps the graphs and example inputs it is handed."""

    def __init__(self):
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    def ops(self, index=-1) -> list[str]:
        out = []
        for node in self.graphs[index].graph.nodes:
            if node.op == "call_function":
                out.append(getattr(node.target, "__name__", str(node.target)))
            elif node.op == "call_method":
                out.append(node.target)
        return out


def compile_strict(fn, **kwargs):
    """Compile with surge's own errors raised (tests of surge itself)."""
    recorder = Recorder()
    options = {"raise_internal_errors": True, **kwargs.pop("options", {})}
    return surge.compile(fn, backend=recorder, options=options, **kwargs), recorder


def same(actual, expected):
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            same(actual[k], expected[k])
    else:
        assert actual == expected, (actual, expected)
