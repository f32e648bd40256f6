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


def check_outcome(fn, outcome, *args):
    """``fn`` compiled (backend eager) returns what eager returns, or raises what it raises
    as ``outcome(fn, *args)`` describes it, on two calls; returns eager's outcome."""
    compiled = surge.compile(fn, backend="eager")
    expected = outcome(fn, *args)
    for _ in range(2):
        actual = outcome(compiled, *args)
        assert actual[0] == expected[0], (actual, expected)
        if expected[0] == "returned":
            same(actual[1], expected[1])
        else:
            assert actual == expected
    return expected
