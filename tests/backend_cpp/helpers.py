"""Shared helpers of the cpp backend tests: ATen graphs, batched builds, comparison with eager.

A compiler run costs about a second, so tests build many graphs into one
library (``compile_aten_graphs_cpp``) and then check each graph on its own.
"""
from __future__ import annotations

import torch
import torch._decomp
from torch.fx.experimental.proxy_tensor import make_fx

from surge.backends.cpp import compile_aten_graphs_cpp


def aten_graph(fn, *inputs) -> torch.fx.GraphModule:
    """``fn`` traced to core ATen ops (tests only; the library has its own aot layer)."""
    return make_fx(fn, decomposition_table=torch._decomp.core_aten_decompositions())(*inputs)


def compile_cases(cases: dict) -> dict:
    """``{name: (fn, make_inputs)}`` -> ``{name: compiled graph}``, all in one library."""
    names = sorted(cases)
    graphs = []
    for name in names:
        fn, make_inputs = cases[name]
        inputs = make_inputs()
        graphs.append((aten_graph(fn, *inputs), list(inputs)))
    return dict(zip(names, compile_aten_graphs_cpp(graphs)))


def assert_matches_eager(fn, compiled, *inputs, **tol):
    """Run both on ``inputs`` and compare every output (structure, dtype, values, NaN places)."""
    expected = fn(*inputs)
    actual = compiled(*inputs)
    if isinstance(expected, torch.Tensor):
        expected = (expected,)
        actual = (actual,) if isinstance(actual, torch.Tensor) else actual
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, e.shape, a.dtype, e.dtype)
        torch.testing.assert_close(a, e, equal_nan=True, **tol)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)
