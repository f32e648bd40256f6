"""aot_eager as a torch.compile backend (Dynamo's graphs as input), the bench, the docs."""
import pathlib

import torch
import torch.nn as nn

import surge
import surge.aot
from surge.aot.backend import aot_eager_backend
from surge.aot.decompositions import describe_core_set
from surge.backends import lookup_backend
from surge.options import Options

from .opinfo_known import KNOWN_FALLBACKS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def strict_backend(gm, example_inputs):
    return aot_eager_backend(gm, example_inputs, options=Options(raise_internal_errors=True))


def test_registered_by_name():
    assert lookup_backend("aot_eager") is aot_eager_backend


def test_dynamo_graphs_with_modules_grad_modes_and_mutation():
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.GELU(), nn.Linear(8, 2))
    reference = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.GELU(), nn.Linear(8, 2))
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=strict_backend)
    x = torch.randn(4, 8)
    compiled(x).pow(2).sum().backward()
    reference(x).pow(2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"{name}: {m}")
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)

    def f(x, y):
        with torch.no_grad():
            z = x * 2
        with torch.autocast("cpu", dtype=torch.bfloat16):
            w = x @ y
        x.add_(1)
        return z, w, x.t()

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    x_ref = x.clone()
    got = torch.compile(f, backend=strict_backend)(x, y)
    want = f(x_ref, y)
    assert got[1].dtype == torch.bfloat16
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(x, x_ref)
    torch._dynamo.reset()


def test_unsupported_graph_falls_back_to_eager_and_is_counted():
    def f(x):
        return x[x > 0].sum()             # data-dependent size

    graph = torch.fx.symbolic_trace(f)
    before = surge.counters["fallbacks"]
    run = aot_eager_backend(graph, [torch.randn(5)], options=Options())
    assert surge.counters["fallbacks"] == before + 1
    x = torch.randn(5)
    torch.testing.assert_close(run(x), f(x))


def test_memory_bench_saves_less_than_eager():
    import importlib.util

    spec = importlib.util.spec_from_file_location("aot_memory", ROOT / "bench" / "aot_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = bench.measure(batch=32, width=64, device="cpu", peer=False)
    eager, ours = report["results"]["eager"], report["results"]["surge"]
    # Linear, LayerNorm and GELU each save a batch x width tensor in eager; the
    # partitioner keeps the matmul results and the matmul inputs (GELU's outputs, which
    # the weight gradients read), and recomputes the rest.
    assert eager["saved_bytes"] >= (3 * 12 - 1) * 32 * 64 * 4   # the first input is not counted
    assert ours["saved_bytes"] <= 0.7 * eager["saved_bytes"]


def test_docs_list_core_set_and_known_fallbacks():
    doc = (ROOT / "docs" / "aot.md").read_text()
    assert describe_core_set() in doc
    for name in KNOWN_FALLBACKS:
        assert f"| {name} |" in doc, name


def test_aten_nodes_carry_the_users_source_location():
    torch._dynamo.reset()
    seen = {}

    def recording_backend(gm, example_inputs):
        seen["aten"] = surge.aot.trace_aten(gm, example_inputs)
        return gm.forward

    def user_function(x):
        return torch.nn.functional.gelu(x) * 3

    torch.compile(user_function, backend=recording_backend)(torch.randn(4))
    traces = [n.meta.get("stack_trace", "") for n in seen["aten"].graph.nodes if n.op == "call_function"]
    assert traces and all("user_function" in t and __file__ in t for t in traces)
    torch._dynamo.reset()
