"""The memory plan's arena: one allocation per call, buffers at offsets in it.

Checked on the plan (slots of buffers alive at the same step never share a byte, in-place
pairs share their slot, offsets are aligned, graph outputs and large buffers stay out),
on the generated host code (how many allocations a call makes; C++ passes addresses)
and on results against eager, for both targets (Triton interpreted) and symbolic sizes.
"""
from __future__ import annotations

import dataclasses
import os

import pytest
import sympy
import torch
import torch.nn.functional as F

from surge.backends.cpp import compile_aten_graph_cpp, target_for as cpp_target_for
from surge.backends.triton import compile_aten_graph, target_for
from surge.lowering.lower import lower_graph
from surge.lowering.sizes import product
from surge.options import CompileConfig, Options
from surge.schedule import schedule_graph
from surge.schedule.arena import extern_operands

from .helpers import DEVICE, aten_graph, assert_matches_eager, compile_fn
from .test_symbolic_sizes import symbolic_graph


def _options() -> Options:
    return Options(raise_internal_errors=True, graph_cache=False, cache_dir=os.environ["SURGE_CACHE_DIR"])


def many_intermediates(x, w):
    """Kernels whose results only later kernels read, around two matmuls."""
    a = torch.softmax(x, -1)
    b = torch.softmax(a.t(), -1)
    c = b @ w
    d = F.layer_norm(c, [c.shape[-1]])
    e = F.layer_norm(d.t() + 1, [d.shape[0]])
    return e @ w[:e.shape[-1], :e.shape[-1]], d


def symbolic_intermediates(x, w):
    """``many_intermediates`` without the last matmul (a slice of a symbolic size)."""
    a = torch.softmax(x, -1)
    b = torch.softmax(a.t(), -1)
    d = F.layer_norm(b @ w, [w.shape[-1]])
    return F.layer_norm(d.t() + 1, [d.shape[0]]) * 2, d


def in_place_in_the_arena(x, w):
    """``a`` is read by a matmul and, for the last time, by the pointwise kernel of ``b``,
    which writes over it; neither is a graph output."""
    a = torch.softmax(x, -1)
    c = a @ w
    b = a * 2 + c
    return b @ w


def _inputs(n=16, m=16, device="cpu"):
    """CPU tensors for the C++ target; ``device=DEVICE`` for Triton (interpreted on a CPU)."""
    return [torch.randn(n, m, device=device), torch.randn(n, n, device=device)]


def _at(expr, values: dict) -> int:
    return int(sympy.sympify(expr).subs(values))


def check_arena(schedule, values: dict | None = None) -> None:
    """The arena's invariants at the sizes ``values`` (the hints when None)."""
    graph, plan = schedule.graph, schedule.memory
    arena = plan.arena
    values = values if values is not None else graph.sizes.hints
    outputs = {o.arg.buffer for o in graph.outputs if hasattr(o.arg, "buffer")}
    size = _at(arena.size, values)
    for root, slot in arena.slots.items():
        start, nbytes = _at(slot.offset, values), _at(slot.nbytes, values)
        assert start % arena.alignment == 0 and nbytes % arena.alignment == 0, (root, start, nbytes)
        assert start + nbytes <= size
        for name, r in arena.root_of.items():
            if r == root:
                buf = graph.by_name[name]
                needs = buf.dtype.itemsize * (1 + sum((_at(n, values) - 1) * _at(s, values)
                                                      for n, s in zip(buf.layout.shape, buf.layout.stride)))
                assert needs <= nbytes, (name, needs, nbytes)
                assert name not in outputs
    slots = list(arena.slots.values())
    for k, a in enumerate(slots):
        for b in slots[k + 1:]:
            if a.first <= b.last and b.first <= a.last:   # alive at one step
                a0, b0 = _at(a.offset, values), _at(b.offset, values)
                assert a0 + _at(a.nbytes, values) <= b0 or b0 + _at(b.nbytes, values) <= a0, (a, b)
    for sm in plan.steps:   # an output written in place lives in its donor's slot
        for name, src in sm.allocate:
            if src is not None and src in arena.root_of:
                assert arena.root_of.get(name) == arena.root_of[src]


def test_cpp_kernels_get_addresses_in_one_arena():
    inputs = _inputs()
    compiled = compile_aten_graph_cpp(aten_graph(many_intermediates, *inputs), inputs, _options())
    plan = compiled.schedule.memory
    check_arena(compiled.schedule)
    # the softmax and layer-norm statistics, which only kernels read: one arena; the matmul
    # operands and the outputs keep allocations of their own (on a CPU a view of the arena
    # costs more than an allocation)
    assert len(plan.arena.slots) == 4, str(plan)
    assert plan.allocator_calls == plan.allocations - 3, str(plan)
    assert not set(plan.arena.root_of) & extern_operands(compiled.schedule.graph)
    call = compiled.source.split("def call(args):")[1]
    assert call.count("empty_strided(") == plan.allocator_calls
    assert "_base + " in call and "as_strided(_arena" not in call   # addresses, no tensors
    assert compiled.memory["slots"] and compiled.memory["alignment"] == 64
    for _ in range(2):
        assert_matches_eager(many_intermediates, compiled, *_inputs(), atol=1e-3, rtol=1e-3)


def test_triton_buffers_are_views_of_one_arena():
    inputs = _inputs(device=DEVICE)
    compiled = compile_fn(many_intermediates, *inputs, options=_options())
    plan = compiled.schedule.memory
    check_arena(compiled.schedule)
    root = {}
    for sm in plan.steps:
        for name, src in sm.allocate:
            root[name] = name if src is None else root.get(src, src)
    output_storages = {root[o.arg.buffer] for o in compiled.schedule.graph.outputs if o.arg.buffer in root}
    # every storage the plan allocates but the graph outputs' is in the arena
    assert output_storages and plan.allocator_calls == 1 + len(output_storages), str(plan)
    call = compiled.source.split("def call(args):")[1]
    assert call.count("empty_strided(") == plan.allocator_calls
    assert compiled.memory["alignment"] == 128
    assert_matches_eager(many_intermediates, compiled, *_inputs(device=DEVICE), atol=1e-3, rtol=1e-3)


def test_an_output_written_in_place_stays_in_its_donors_slot():
    inputs = _inputs(device=DEVICE)
    compiled = compile_fn(in_place_in_the_arena, *inputs, options=_options())
    plan = compiled.schedule.memory
    pairs = [(n, s) for sm in plan.steps for n, s in sm.allocate if s in sm.in_place()]
    assert pairs and all(plan.arena.root_of.get(n) == plan.arena.root_of.get(s) is not None for n, s in pairs), \
        str(plan)
    check_arena(compiled.schedule)
    assert_matches_eager(in_place_in_the_arena, compiled, *_inputs(device=DEVICE), atol=1e-3, rtol=1e-3)


def test_buffers_over_the_targets_limit_keep_their_own_allocations():
    inputs = _inputs(256, 16)   # the first softmax's statistics take 1 KiB, the layer norms' 64 B
    target = dataclasses.replace(cpp_target_for(CompileConfig()), arena_buffer_limit=512)
    graph, _ = lower_graph(aten_graph(many_intermediates, *inputs), inputs, target=target)
    plan = schedule_graph(graph).memory
    extern_read = extern_operands(graph)
    kernel_only = [graph.by_name[n] for sm in plan.steps for n, src in sm.allocate
                   if src is None and n not in extern_read and n in {x for s in plan.steps for x in s.free_after}]
    small = [b.name for b in kernel_only if int(product(b.layout.shape)) * b.dtype.itemsize <= 512]
    large = [b.name for b in kernel_only if int(product(b.layout.shape)) * b.dtype.itemsize > 512]
    assert small and large, str(plan)
    assert set(small) <= set(plan.arena.root_of) and not set(large) & set(plan.arena.root_of), str(plan)


@pytest.mark.parametrize("target_name", ["cpp", "triton"])
def test_symbolic_offsets_hold_at_every_size(target_name):
    device = "cpu" if target_name == "cpp" else DEVICE
    x, w = _inputs(12, 16, device)
    gm, examples = symbolic_graph(symbolic_intermediates, [x, w], {0: (0,), 1: (0, 1)})
    compile_ = compile_aten_graph_cpp if target_name == "cpp" else compile_aten_graph
    compiled = compile_(gm, examples, _options())
    arena = compiled.schedule.memory.arena
    assert arena.slots and not arena.size.is_Integer   # the host code computes it per call
    symbols = compiled.schedule.graph.sizes.symbols
    for n in (2, 3, 5, 17, 64, 1000):
        check_arena(compiled.schedule, {s: n + 7 * k for k, s in enumerate(symbols)})
    for n in (3, 9, 40):
        args = _inputs(n, 16, device)
        for a, e in zip(compiled(*args), symbolic_intermediates(*args)):
            torch.testing.assert_close(a, e, atol=1e-3, rtol=1e-3)


def test_a_plan_without_arena_slots_allocates_no_arena():
    x = torch.randn(8, 8)
    compiled = compile_aten_graph_cpp(aten_graph(lambda v: v.sin() + 1, x), [x], _options())
    assert not compiled.schedule.memory.arena.slots
    assert "_arena" not in compiled.source and compiled.memory == {"arena_bytes": 0, "alignment": 1, "slots": {}}


def test_compiled_triton_kernels_get_addresses_of_the_arenas_kernel_only_buffers(tmp_path):
    """For compiled Triton kernels the host code passes the arena's kernel-only buffers as
    ``_base + offset`` integers (no ``as_strided`` view per buffer and call) and names their
    positions in the kernels' metadata. Run here by interpreted kernels whose launcher
    turns each address back into a tensor over the call's arena: the results are eager's
    only if every address is its buffer's slot."""
    import hashlib

    from surge.codegen.triton.module import generate_module
    from surge.runtime import code_cache
    from surge.runtime.launcher import _pointer_dtypes, make_launcher

    inputs = _inputs(device=DEVICE)
    interpreted = target_for(torch.device(DEVICE))
    config = CompileConfig()
    graph, _ = lower_graph(aten_graph(many_intermediates, *inputs), inputs, target=interpreted, config=config)
    schedule = schedule_graph(graph)
    source, _ = generate_module(schedule, dataclasses.replace(interpreted, interpreted=False), config)
    call = source.split("def call(args):")[1]
    kernel_only = set(schedule.memory.arena.root_of) - extern_operands(graph)
    assert kernel_only and "_base = _arena.data_ptr()" in call and "_base + " in call
    assert not any(f"{name} = as_strided(_arena" in call for name in kernel_only)
    path = code_cache.write_module(str(tmp_path), "graphs", hashlib.sha256(source.encode()).hexdigest()[:24], source)
    module = code_cache.load_module(path, source)
    arenas = []

    def allocate(shape, stride, **kwargs):
        out = torch.empty_strided(shape, stride, **kwargs)
        if kwargs.get("dtype") is torch.uint8:
            arenas.append(out)   # the call's arena
        return out

    module.empty_strided = allocate
    addressed = {name: meta["addresses"] for name, meta in module.KERNELS.items() if meta.get("addresses")}
    assert addressed

    def through_the_arena(name, meta):
        tensors_meta = {k: v for k, v in meta.items() if k != "addresses"}   # it is given tensors
        launch = make_launcher(getattr(module, name), name, tensors_meta, source, str(tmp_path))
        dtypes = _pointer_dtypes(meta)

        def run(*args):
            arena = arenas[-1]
            tensors = [arena[a - arena.data_ptr():].view(dtypes[k]) if k in addressed.get(name, ()) else a
                       for k, a in enumerate(args[:len(dtypes)])]
            launch(*tensors, *args[len(dtypes):])
        return run

    run = module.make_call({name: through_the_arena(name, meta) for name, meta in module.KERNELS.items()})
    for _ in range(2):
        args = _inputs(device=DEVICE)
        for actual, expected in zip(run(list(args)), many_intermediates(*args)):
            torch.testing.assert_close(actual, expected, atol=1e-3, rtol=1e-3)


def scatter_into_a_fresh_buffer(x, w):
    """What autograd's ``as_strided`` backward traces to: zeros, and the gradient scattered
    into them at offsets counted from their storage's start. ``a`` is alive meanwhile, so
    the zeros' buffer would sit above it in the arena."""
    a = torch.softmax(x, -1)
    zeros = torch.zeros(x.numel() + 8, device=x.device) + w.sum()   # a window over part of it: an ATen call
    scattered = torch.ops.aten.as_strided_scatter(zeros, a * 2, list(x.shape), [x.shape[1], 1], 0)
    return (scattered[:x.numel()].view(x.shape) + a) @ w


def test_an_operand_read_as_a_storage_keeps_its_own_allocation():
    """A ``*_scatter`` or ``as_strided`` extern given a view into the arena would clone the
    whole arena and scatter at its start, outside the result's window (zero gradients
    through a timm ConvNeXt's head on the GPU)."""
    inputs = _inputs(device=DEVICE)
    compiled = compile_fn(scatter_into_a_fresh_buffer, *inputs, options=_options())
    graph = compiled.schedule.graph
    operands = [b.args[0].buffer for b in graph.buffers
                if getattr(b, "op", None) is torch.ops.aten.as_strided_scatter.default]
    assert operands, "the scatter is an extern call"
    for _ in range(2):
        assert_matches_eager(scatter_into_a_fresh_buffer, compiled, *_inputs(device=DEVICE), atol=1e-4, rtol=1e-4)
    assert not set(operands) & set(compiled.schedule.memory.arena.root_of), str(compiled.schedule.memory)
    check_arena(compiled.schedule)
