"""Symbolic-size C++ kernels emit their loop nest once (codegen/cpp/thread_ranges.py).

The nest is a rows function over a range of the loops the OpenMP team shares; the kernel
calls it per thread on its part of the range for enough work, else once on the whole
range. Each program runs through ``surge.compile(dynamic=True, backend="cpp")`` at sizes
below the parallel threshold (32768 elements of work) and above it, against eager, with
no compile after the first call; the structure tests read the library's source.
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import surge
from surge.codegen.cpp.prelude import PRELUDE
from surge.counters import counters
from surge.runtime import cpp_build


@pytest.fixture
def sources(monkeypatch):
    """The C++ sources (without the prelude) of the libraries built while the test runs."""
    built = []
    real = cpp_build.load_library

    def load_library(source, toolchain, cache_dir):
        built.append(source[len(PRELUDE):] if source.startswith(PRELUDE) else source)
        return real(source, toolchain, cache_dir)
    monkeypatch.setattr(cpp_build, "load_library", load_library)
    return built


def _run(fn, make_inputs, sizes, tol=1e-4):
    """``fn`` compiled with symbolic sizes, at each size against eager; one graph for all."""
    torch.manual_seed(0)
    compiled = surge.compile(fn, dynamic=True, backend="cpp", fullgraph=True)
    graphs = counters["graphs"]
    for k, size in enumerate(sizes):
        inputs = make_inputs(size)
        expected, actual = fn(*inputs), compiled(*inputs)
        for a, e in zip(actual, expected) if isinstance(expected, tuple) else [(actual, expected)]:
            torch.testing.assert_close(a, e, rtol=tol, atol=tol)
        if k == 0:
            graphs = counters["graphs"]
    assert counters["graphs"] == graphs, "a later size compiled another graph"
    return compiled


def _kernel(source: str, name_part: str) -> str:
    """The functions (a rows function and its kernel) whose names contain ``name_part``."""
    functions = [f for f in source.split("\n}\n")
                 if re.search(rf"static \S+ cpp_\w*{name_part}", f.strip().split("\n", 1)[0])]
    assert functions, f"no kernel named *{name_part}*"
    return "\n}\n".join(functions) + "\n}\n"


def _pointwise(x, y):
    return F.gelu(x) * 2 + 1, torch.tanh(y) * y


# (n, m): x is [n], y is [n, m]; work below and above the threshold, odd lengths so that
# each thread's part of the range ends inside an inner row
POINTWISE_SIZES = [5, 37, 40_009, 3, 70_001]


def test_pointwise(sources):
    _run(_pointwise, lambda n: (torch.randn(n), torch.randn(max(n // 64, 2), 67)), POINTWISE_SIZES)
    gelu = _kernel(sources[-1], "erf")
    # the nest once: the GELU's CDF is computed in one loop, a rows function over x0
    assert gelu.count("surge_one_plus_erf(") + gelu.count("surge_normal_cdf(") == 1
    assert "_rows(" in gelu and "#pragma omp parallel\n" in gelu and " if(" not in gelu
    assert "#pragma omp simd\n    for (int64_t x0 = x_begin; x0 < x_end; ++x0) {" in gelu


def _rows_and_reductions(x, z):
    """A softmax and a sum over rows of a 4-D tensor: one range over three collapsed dims."""
    return torch.softmax(x * 0.5, -1), x.sum(-1), z.transpose(1, 2).contiguous() * 3


def test_collapsed_dims(sources):
    def inputs(t):
        return torch.randn(2, 3, t, t), torch.randn(2, t, 3, 5)
    _run(_rows_and_reductions, inputs, [4, 7, 67, 5, 131, 9])
    source = sources[-1]
    assert source.count("#pragma omp parallel\n") >= 2 and "collapse(" not in source
    assert "x_begin / " in source and "if (++x" in source   # the range's first point, then carries
    # each nest once: the softmax's exp in one loop
    assert source.count("surge_expf(") == 1


def _matmul_epilogue(x, w, b):
    h = x @ w
    return F.relu(h + b) * 2, (h * h).sum(-1)


def test_matmul_epilogue():
    _run(_matmul_epilogue, lambda n: (torch.randn(n, 24), torch.randn(24, 300), torch.randn(300)),
         [3, 17, 200, 2, 513, 9], tol=1e-3)


def test_single_row_reduction_keeps_two_forms(sources):
    """A single row split across threads has no range to share out (its passes are parallel
    loops one after another): it keeps the team's form and the serial one."""
    def f(x):
        return (x - x.max()).exp().sum(), x.sum()
    _run(f, lambda n: (torch.randn(n),), [9, 40_000, 33, 100_003], tol=1e-3)
    source = sources[-1]
    assert "_rows(" not in source
    assert re.search(r"#pragma omp parallel for simd schedule\(static\) if\(s\d+ >= 32768\) reduction", source)
    assert "} else {" in source


def _embedding(idx, table, pos):
    return F.embedding(idx, table) + pos


def test_index_checks_through_the_rows_function(sources):
    """Index checks OR their bits in the rows function, which returns them; the kernel ORs
    each thread's bits (its parallel region's reduction) and returns them: an index out of
    range raises as in eager, below and above the threshold."""
    torch.manual_seed(0)
    table = torch.randn(50, 64)
    compiled = surge.compile(_embedding, dynamic=True, backend="cpp", fullgraph=True)
    for n in (6, 900, 3, 1300):
        idx, pos = torch.randint(0, 50, (2, n)), torch.randn(n, 64)
        torch.testing.assert_close(compiled(idx, table, pos), _embedding(idx, table, pos))
        bad = idx.clone()
        bad[1, n // 2] = 50
        with pytest.raises(IndexError):
            compiled(bad, table, pos)
    kernel = _kernel(sources[-1], "embedding")
    assert re.search(r"static int64_t cpp_\w+_rows\(", kernel)
    assert "#pragma omp parallel reduction(|:surge_bad_index)" in kernel
    assert re.search(r"surge_bad_index \|= cpp_\w+_rows\(", kernel)
