"""Shared helpers of the backend tests: ATen graphs of small programs, compile, compare."""
from __future__ import annotations

import torch
import torch._decomp
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from surge.backends.triton import compile_aten_graph, target_for
from surge.options import Options
from surge.lowering.lower import lower_graph
from surge.schedule import schedule_graph

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def aten_graph(fn, *inputs) -> torch.fx.GraphModule:
    """``fn`` traced to core ATen ops (tests only; the library has its own aot layer)."""
    return make_fx(fn, decomposition_table=torch._decomp.core_aten_decompositions())(*inputs)


def schedule_of(fn, *inputs, target=None, config=None):
    graph, _ = lower_graph(aten_graph(fn, *inputs), list(inputs), target=target, config=config)
    return schedule_graph(graph)


def compile_fn(fn, *inputs, options: Options | None = None, **changes):
    """``fn`` through the one pipeline with the Triton target; ``changes`` are options
    (``persistent_reduction_limit=16``, ``autotune=True``) applied over ``options``."""
    options = (options or Options.from_env()).replace(**changes)
    return compile_aten_graph(aten_graph(fn, *inputs), list(inputs), options)


def triton_target_here():
    """The Triton target kernels of this machine's test tensors are generated for."""
    return target_for(torch.device(DEVICE))


def assert_matches_eager(fn, compiled, *inputs, **tol):
    """Run both on ``inputs`` and compare every output (structure, dtype, values)."""
    expected = fn(*inputs)
    actual = compiled(*inputs)
    if isinstance(expected, torch.Tensor):
        expected = (expected,)
        actual = (actual,) if isinstance(actual, torch.Tensor) else actual
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, e.shape, a.dtype, e.dtype)
        torch.testing.assert_close(a, e, **tol)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


def assert_outputs_match(actual, expected):
    """Every leaf of a compiled graph's outputs equals eager's (dtype, shape, values, NaN where NaN)."""
    a_flat, e_flat = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    assert len(a_flat) == len(e_flat)
    for a, e in zip(a_flat, e_flat):
        if isinstance(e, torch.Tensor):
            assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, e.dtype, a.shape, e.shape)
            torch.testing.assert_close(a, e, atol=2e-5, rtol=2e-5, equal_nan=True)
        else:
            assert a == e
