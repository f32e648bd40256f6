"""Profiler markers and "is tracing" probes add no graph break: profiler contexts are
no-ops in the graph, and the probes answer as they do under torch.compile."""
from __future__ import annotations

import pytest
import torch

import surge
from frontend_helpers import compile_strict, same
from graph_checks import check_one_graph


@pytest.mark.parametrize("context", [torch.profiler.record_function, torch.autograd.profiler.record_function],
                         ids=["torch.profiler", "torch.autograd.profiler"])
def test_record_function_block_is_one_graph(context):
    def marked(x):
        with context("block"):
            y = x.sin() * 2
        return y + 1

    check_one_graph(marked, lambda i: (torch.randn(3),))


def test_record_function_as_value_and_nested_blocks():
    def nested(x):
        with torch.profiler.record_function("outer") as outer:
            with torch.autograd.profiler.record_function("inner"):
                x = x.cos()
            x = x + 1
        return x, outer is not None

    check_one_graph(nested, lambda i: (torch.randn(3),))


def test_graph_break_inside_a_record_function_block():
    def breaks_inside(x):
        with torch.profiler.record_function("block"):
            y = x.sin()
            print("inside")
            y = y + 1
        return y * 2

    compiled, _ = compile_strict(breaks_inside)
    x = torch.randn(3)
    same(compiled(x), breaks_inside(x))
    assert surge.counters["graph_breaks"] == 1 and surge.counters["fallbacks"] == 0


def test_compiled_call_inside_a_profiler_session_reuses_its_entry():
    def marked(x):
        with torch.profiler.record_function("surge_marker"):
            return x.sin()

    compiled, rec = compile_strict(marked)
    compiled(torch.randn(3))  # captured outside the profiler
    x = torch.randn(3)
    with torch.profiler.profile():
        same(compiled(x), marked(x))
    assert len(rec.graphs) == 1 and surge.counters["recompiles"] == 0 and surge.counters["fallbacks"] == 0


def test_tracing_probes_answer_as_under_torch_compile():
    def probes(x):
        if torch.jit.is_scripting() or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
            return x * 0
        if torch.fx._symbolic_trace.is_fx_tracing():
            return x * 0
        return x + 1, torch.compiler.is_compiling()

    compiled, rec = compile_strict(probes)
    x = torch.randn(3)
    out = compiled(x)
    same(out[0], x + 1)
    assert out[1] is True  # True under surge, as under torch.compile
    assert len(rec.graphs) == 1 and surge.counters["graph_breaks"] == 0 and surge.counters["fallbacks"] == 0
