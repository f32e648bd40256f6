"""Compiled graphs drop each input after its last use: a training step's backward frees
the saved activations as it goes (the runtime hands them over in a list the host
code empties), so the step's peak memory stays at eager's or below."""
import copy

import torch
from torch.profiler import ProfilerActivity, profile

import surge
from surge.backends.cpp import compile_aten_graph_cpp
from surge.tools.workloads import LayerNormMLP

from .helpers import aten_graph


def _peak_bytes(fn) -> int:
    """Peak of the bytes the CPU allocator holds above the start, while ``fn`` runs (profiler events)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def test_training_step_peaks_no_higher_than_eager():
    torch.manual_seed(0)
    eager = LayerNormMLP(256, 6)
    compiled_model = copy.deepcopy(eager)
    compiled = surge.compile(compiled_model, options={"graph_cache": False})
    x = torch.randn(256, 256)
    for _ in range(2):   # compile, then a steady step
        compiled(x).square().mean().backward()
        eager(x).square().mean().backward()
    def step(model):
        return lambda: model(x).square().mean().backward()
    assert _peak_bytes(step(compiled)) <= _peak_bytes(step(eager))


def test_host_code_drops_each_input_after_its_last_use():
    def fn(a, b, c):
        return (a * 2).sum(0) + (b + 1).sum(0), c.exp()
    inputs = [torch.randn(8, 4), torch.randn(8, 4), torch.randn(4)]
    compiled = compile_aten_graph_cpp(aten_graph(fn, *inputs), list(inputs))
    source = compiled.source
    assert "args.clear()" in source
    deleted = {name.strip() for line in source.splitlines() if line.strip().startswith("del ")
               for name in line.strip()[4:].split("#")[0].split(",")}
    assert {"arg0", "arg1", "arg2"} <= deleted, deleted
    args = list(inputs)
    out = compiled.call_boxed(args)
    assert args == []                      # the caller's list was handed over
    for got, want in zip(out, fn(*inputs)):
        torch.testing.assert_close(got, want)


def test_an_input_is_freed_before_the_call_returns():
    """``a`` (4 MiB) is last read by the first kernel: with the caller's list handed over,
    its memory is free again before the matmul and the exponential allocate theirs."""
    def fn(a, b):
        return (a * 2).sum(), torch.mm(b, b).exp()
    n = 1024
    example = [torch.randn(n, n), torch.randn(n, n)]
    compiled = compile_aten_graph_cpp(aten_graph(fn, *example), list(example))
    b = torch.randn(n, n)

    def call():
        args = [torch.randn(n, n), b]   # the list holds the only reference to ``a``
        compiled.call_boxed(args)
    before = _peak_bytes(lambda: None)
    peak = _peak_bytes(call) - before
    tensor = n * n * 4
    # allocating ``a`` (1), then the matmul's and the exponential's results (2 more): 3 tensors
    # held at once unless ``a`` is freed first
    assert peak <= 2 * tensor + tensor // 4, peak / tensor
