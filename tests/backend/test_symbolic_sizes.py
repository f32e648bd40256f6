"""Graphs with symbolic sizes through lowering, scheduling and both code generators.

Each program is traced once with one or two dimensions symbolic (as the frontend, or
Dynamo, hands such graphs to a backend: tensors whose shapes are SymInts, and for
Dynamo's form SymInt placeholders too), compiled once for Triton (interpreted) and once
for C++, and each compiled artifact runs at three sizes other than the traced one
against eager, with no compile in between.
"""
from __future__ import annotations

import os

import pytest
import sympy
import torch
import torch._decomp
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges

from surge.backends.cpp import compile_aten_graph_cpp
from surge.backends.triton import compile_aten_graph
from surge.counters import counters
from surge.errors import SizeGuardFailed
from surge.lowering.lower import lower_graph
from surge.lowering.size_vars import SizeVars
from surge.options import Options
from surge.schedule import schedule_graph

from . import structure_programs as sp
from .helpers import DEVICE, assert_outputs_match

def _options() -> Options:
    return Options(raise_internal_errors=True, graph_cache=False, cache_dir=os.environ["SURGE_CACHE_DIR"])


def symbolic_graph(fn, inputs, dynamic: dict, size_inputs: int = 0):
    """``fn`` traced to core ATen ops with the dims ``dynamic[k]`` of input ``k`` symbolic
    (tests only: the library never runs make_fx or fake tensors). With ``size_inputs``,
    the first that many distinct symbols also become leading SymInt placeholders, as
    Dynamo hands them over. Returns the graph and its example inputs."""
    mode = FakeTensorMode(shape_env=ShapeEnv())
    fakes = []
    for k, t in enumerate(inputs):
        dims = [DimDynamic.DYNAMIC if d in dynamic.get(k, ()) else DimDynamic.STATIC for d in range(t.ndim)]
        fakes.append(mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims)))
    with mode:
        gm = make_fx(fn, decomposition_table=torch._decomp.core_aten_decompositions())(*fakes)
    examples = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    if size_inputs:
        symbols = []
        for f in fakes:
            for s in f.shape:
                if isinstance(s, torch.SymInt) and all(str(s) != str(o) for o in symbols):
                    symbols.append(s)
        first = next(n for n in gm.graph.nodes if n.op == "placeholder")
        for k, s in enumerate(symbols[:size_inputs]):
            with gm.graph.inserting_before(first):
                node = gm.graph.placeholder(f"s{k}")
            node.meta["val"] = s
        gm.graph.lint()
        gm.recompile()
        examples = symbols[:size_inputs] + examples
    return gm, examples


def run_at_sizes(fn, compiled, make_inputs, sizes, size_inputs: int = 0):
    kernels = counters["kernels"]
    for size in sizes:
        inputs = make_inputs(*size)
        expected = fn(*inputs)
        actual = compiled(*list(size[:size_inputs]), *inputs)
        assert_outputs_match(actual, expected)
    assert counters["kernels"] == kernels, "a call compiled kernels again"


# name -> (program, inputs at the traced sizes (n, m), dynamic dims per input)
def _reduction_epilogue(x):
    return (x - x.mean(-1, keepdim=True)) * 2 + x.amax(-1, keepdim=True), x.sum(0)


def _views(x):
    return x.reshape(-1, 4).sum(-1), x.view(x.shape[0] * 2, -1).t().contiguous() + 1, x[:, 1:].exp()


def _views2(x):
    flat = x.reshape(-1, x.shape[-1])   # [n*m, 4]
    return flat.t() * 3, x.transpose(0, 1).reshape(x.shape[1], -1).sum(-1), x.flatten().sin()


def _matmul_epilogue(x, w, b):
    return F.relu(x @ w + b) * 2


def _matmul_epilogue2(x, w, b):
    return torch.tanh(x @ w + b).sum(-1)


def _data_movement(x, y):
    """cat, slices from the start and the end, flip, select, expand and zeros of symbolic sizes."""
    return (torch.cat([x, y * 2], 0).sum(0), x[2:].cos() + x[-1], torch.flip(x, [0]) + x[:, :1].expand_as(x),
            x.new_zeros(x.shape[0], 3) + x[:, 0:1])


def _attention_block(x, w, b):
    """LayerNorm, attention scores over the symbolic rows (a softmax over a symbolic
    length), GELU with a residual, a row sum and a column variance."""
    h = F.layer_norm(x, (x.shape[-1],), w, b)
    a = torch.softmax(h @ h.transpose(-1, -2) / 8, -1) @ h
    return F.gelu(a + x).sum(-1), h.var(0)


def _chain2(x, y):
    return sp.pointwise_chain(x, y)


ONE = {   # one symbolic size: n (the rows)
    "reduction_epilogue": (_reduction_epilogue, lambda n, m: (torch.randn(n, 12),), {0: [0]}),
    "pointwise_chain": (sp.pointwise_chain, lambda n, m: (torch.randn(n, 3), torch.randn(n, 3)), {0: [0], 1: [0]}),
    "views": (_views, lambda n, m: (torch.randn(n, 8),), {0: [0]}),
    "matmul_epilogue": (_matmul_epilogue, lambda n, m: (torch.randn(n, 16), torch.randn(16, 8), torch.randn(8)),
                        {0: [0]}),
    "softmax": (sp.softmax, lambda n, m: (torch.randn(n, 16),), {0: [0]}),
    "attention_block": (_attention_block, lambda n, m: (torch.randn(n, 16), torch.randn(16), torch.randn(16)),
                        {0: [0]}),
}

TWO = {   # two symbolic sizes: n and m
    "reduction_epilogue": (_reduction_epilogue, lambda n, m: (torch.randn(n, m),), {0: [0, 1]}),
    "pointwise_chain": (_chain2, lambda n, m: (torch.randn(n, m), torch.randn(n, m)), {0: [0, 1], 1: [0, 1]}),
    "views": (_views2, lambda n, m: (torch.randn(n, m, 4),), {0: [0, 1]}),
    "matmul_epilogue": (_matmul_epilogue2, lambda n, m: (torch.randn(n, 8), torch.randn(8, m), torch.randn(m)),
                        {0: [0], 1: [1], 2: [0]}),
    "softmax": (sp.softmax, lambda n, m: (torch.randn(n, m),), {0: [0, 1]}),
    "data_movement": (_data_movement, lambda n, m: (torch.randn(n, m), torch.randn(n, m)), {0: [0, 1], 1: [0, 1]}),
}

TRACED = (6, 5)
SIZES = [(3, 7), (9, 2), (4, 13)]


def on_device(target, make_inputs):
    """Triton's inputs on the GPU when there is one (else interpreted on the CPU); C++'s on the CPU."""
    device = DEVICE if target == "triton" else "cpu"
    return lambda *size: tuple(t.to(device) for t in make_inputs(*size))


def _compile(target, gm, examples):
    if target == "triton":
        return compile_aten_graph(gm, examples, _options())
    return compile_aten_graph_cpp(gm, examples, _options())


@pytest.mark.parametrize("target", ["triton", "cpp"])
@pytest.mark.parametrize("name", sorted(ONE))
def test_one_symbolic_size(target, name):
    fn, make_inputs, dynamic = ONE[name]
    make_inputs = on_device(target, make_inputs)
    gm, examples = symbolic_graph(fn, make_inputs(*TRACED), dynamic)
    compiled = _compile(target, gm, examples)
    assert "s0 = arg0.shape[0]" in compiled.source   # the size is read from the call's tensors
    run_at_sizes(fn, compiled, make_inputs, SIZES)


@pytest.mark.parametrize("target", ["triton", "cpp"])
@pytest.mark.parametrize("name", sorted(TWO))
def test_two_symbolic_sizes(target, name):
    fn, make_inputs, dynamic = TWO[name]
    make_inputs = on_device(target, make_inputs)
    gm, examples = symbolic_graph(fn, make_inputs(*TRACED), dynamic)
    compiled = _compile(target, gm, examples)
    assert "s1 = " in compiled.source
    run_at_sizes(fn, compiled, make_inputs, SIZES)


@pytest.mark.parametrize("target", ["triton", "cpp"])
def test_size_placeholders_as_dynamo_hands_them(target):
    """SymInt placeholders before the tensors: the host code reads the sizes from them."""
    fn, make_inputs, dynamic = TWO["matmul_epilogue"]
    make_inputs = on_device(target, make_inputs)
    gm, examples = symbolic_graph(fn, make_inputs(*TRACED), dynamic, size_inputs=2)
    assert isinstance(examples[0], torch.SymInt)
    compiled = _compile(target, gm, examples)
    assert "s0 = size0" in compiled.source and "s1 = size1" in compiled.source
    run_at_sizes(fn, compiled, make_inputs, SIZES, size_inputs=2)


def test_kernels_take_sizes_as_arguments():
    """A symbolic kernel's sizes are arguments (no size literal of the traced shape); its
    launch grid comes from each call's sizes. A static graph's kernels are unchanged."""
    fn, make_inputs, dynamic = TWO["softmax"]
    make_inputs = on_device("triton", make_inputs)
    gm, examples = symbolic_graph(fn, make_inputs(*TRACED), dynamic)
    compiled = _compile("triton", gm, examples)
    (meta,) = compiled.module.KERNELS.values()
    assert meta["symbolic"] and meta["xnumel"] == "s0" and meta["rnumel"] == "s1"
    assert "s1, xnumel, rnumel" in compiled.source   # a size parameter of the kernel
    # no size here is a multiple of 16 for every size: Triton specializes on none (one binary)
    assert "@triton.jit(do_not_specialize=['s1', 'xnumel', 'rnumel'])" in compiled.source
    assert "(s0, s1, )" in compiled.source           # the output's shape at run time
    launcher = next(iter(compiled.launchers.values()))
    run_at_sizes(fn, compiled, make_inputs, SIZES)
    assert set(launcher.state) == {(n, m) for n, m in SIZES}   # one grid and config per size
    # persistent at the hint: each call's row must fit one Triton block
    assert "if not ((1048576 - s1) >= 0):" in compiled.source

    static_inputs = make_inputs(*TRACED)
    static = compile_aten_graph(make_fx(fn)(*static_inputs), list(static_inputs), _options())
    (meta,) = static.module.KERNELS.values()
    assert "symbolic" not in meta and meta["xnumel"] == 6 and meta["rnumel"] == 5
    assert "s0" not in static.source


def test_sizes_that_are_multiples_of_16_for_every_size_stay_specialized():
    """``32 * s0`` elements are a multiple of 16 at every size: Triton may keep specializing
    on it (its masks stay vectorizable) since every call gives the same specialization."""
    x = torch.randn(6, 32)
    gm, examples = symbolic_graph(lambda v: (v * 2).relu(), [x], {0: (0,)})
    compiled = _compile("triton", gm, examples)
    (meta,) = compiled.module.KERNELS.values()
    assert meta["symbolic"] and meta["xnumel"] == "32*s0"
    assert "do_not_specialize" not in compiled.source and "@triton.jit\n" in compiled.source
    run_at_sizes(lambda v: (v * 2).relu(), compiled, lambda n: (torch.randn(n, 32),), [(3,), (17,)])


@pytest.mark.parametrize("target", ["triton", "cpp"])
def test_a_decision_that_needs_a_number_is_guarded(target):
    """``x[:, :4]`` clamps at the symbolic width: the compile takes the traced case (4 <=
    m) and guards it; a call with a narrower input is refused, not answered wrongly."""
    def fn(x):
        return x[:, :4] * 2

    make_inputs = on_device(target, lambda n, m: (torch.randn(n, m),))
    gm, examples = symbolic_graph(fn, make_inputs(*TRACED), {0: [0, 1]})
    # tracing refined m's range to [4, inf) (a guard of the frontend's); without it the
    # backend must guard the clamp itself
    env = examples[0].shape[1].node.shape_env
    for symbol in env.var_to_range:
        env.var_to_range[symbol] = ValueRanges(2, int_oo)
    graph, _ = lower_graph(gm, examples)
    assert [str(g) for g in graph.sizes.guards] == ["s1 - 4 >= 0"]
    compiled = _compile(target, gm, examples)
    run_at_sizes(fn, compiled, make_inputs, [(3, 4), (7, 9), (2, 5)])
    # the host code refuses such sizes (the driver's ``SizeVariants`` catches that; here the
    # traced graph itself assumed 4 <= m, so no call with a narrower input reaches it)
    with pytest.raises(SizeGuardFailed):
        compiled.variants[0](*make_inputs(3, 3))


def test_a_broken_guard_compiles_a_variant(monkeypatch, tmp_path):
    """A persistent Triton reduction guards its row's length (one Triton block, made tiny
    here): a longer row gets a variant compiled for it (looped), logged, never an error;
    later calls run the first variant whose guards hold."""
    import surge.codegen.triton.kernel as triton_kernel

    monkeypatch.setattr(triton_kernel, "TRITON_MAX_BLOCK", 16)
    fn, make_inputs, dynamic = TWO["softmax"]
    make_inputs = on_device("triton", make_inputs)
    gm, examples = symbolic_graph(fn, make_inputs(6, 8), dynamic)
    # a code cache of its own: the patched limit is no part of the generated modules' key
    compiled = compile_aten_graph(gm, examples, _options().replace(cache_dir=str(tmp_path)))
    assert "if not ((16 - s1) >= 0):" in compiled.source
    run_at_sizes(fn, compiled, make_inputs, [(3, 7), (9, 16)])
    variants = counters["size_variants"]
    for size in [(3, 20), (5, 33), (2, 9), (4, 17)]:
        inputs = make_inputs(*size)
        assert_outputs_match(compiled(*inputs), fn(*inputs))
    assert counters["size_variants"] == variants + 1 and len(compiled.variants) == 2
    assert "(16 - s1) < 0" in compiled.variants[1].source   # chosen from the failing call's sizes


def test_schedule_fuses_symbolic_groups():
    """Spaces agree as expressions: a reduction and its epilogue over [s0 | s1] are one
    kernel."""
    fn, make_inputs, dynamic = TWO["reduction_epilogue"]
    gm, examples = symbolic_graph(fn, make_inputs(*TRACED), dynamic)
    graph, _ = lower_graph(gm, examples)
    schedule = schedule_graph(graph)
    kernels = [str(k) for k in schedule.kernels]
    assert len(kernels) == 2, kernels   # the rows' kernel and the column sum
    assert "[s0 | s1]" in kernels[0] and "(reduction)" in kernels[0] and "(xr)" in kernels[0], kernels
    assert "[s1 | s0]" in kernels[1], kernels


def test_size_vars_facts_hints_and_guards():
    sv = SizeVars()
    s0, s1 = sv.new_symbol(6), sv.new_symbol(5)
    assert sv.hint(2 * s0 * s1 + 1) == 61 and sv.static(2 * s0) is None and sv.static(sympy.Integer(4)) == 4
    assert sv.known_leq(s0, s0 * s1) and sv.known_leq(2, s0) and not sv.known_leq(3, s0)
    assert sv.known_divisible(4 * s0 + 8 * s1, 4) and not sv.known_divisible(4 * s0 + s1, 4)
    assert sv.known_divisible(s0 * s1 + 3 * s0, s0)
    assert not sv.guards
    assert sv.guard_leq(s0, 8) and sv.guard_equal(s1, 5) and not sv.guard_divisible(s0, 4)
    assert [str(g) for g in sv.guards] == ["8 - s0 >= 0", "s1 - 5 == 0", "s0 % 4 != 0"]
    sv.check({s0: 7, s1: 5})
    with pytest.raises(SizeGuardFailed):
        sv.check({s0: 8, s1: 5})
    assert sv.guard_leq(s0, 100) and len(sv.guards) == 3   # implied by s0 <= 8: not recorded


def test_module_key_is_the_symbolic_form():
    """Traced at other example sizes, the same program has the same generated-module key
    (a new process reuses the dynamic graph); other ranges (other guards) another key."""
    from surge.runtime.code_cache import graph_key

    fn, make_inputs, dynamic = TWO["softmax"]
    gm_a, ex_a = symbolic_graph(fn, make_inputs(6, 5), dynamic)
    gm_b, ex_b = symbolic_graph(fn, make_inputs(9, 3), dynamic)
    key = graph_key(gm_a, ex_a, [], ("knobs",))
    assert graph_key(gm_b, ex_b, [], ("knobs",)) == key
    env = ex_b[0].shape[1].node.shape_env
    for symbol in env.var_to_range:
        env.var_to_range[symbol] = ValueRanges(4, int_oo)
    assert graph_key(gm_b, ex_b, [], ("knobs",)) != key
    static = make_inputs(6, 5)
    assert graph_key(make_fx(fn)(*static), static, [], ("knobs",)) != key


def test_symbolic_kernels_compile_for_sm90(tmp_path):
    """Each symbolic kernel compiles for the H200's target (at its example sizes)."""
    from surge.runtime.target_compile import compile_in_subprocess

    paths = []
    for table in (ONE, TWO):
        for name in ("softmax", "views", "reduction_epilogue"):
            fn, make_inputs, dynamic = table[name]
            gm, examples = symbolic_graph(fn, make_inputs(*TRACED), dynamic)
            paths.append(_compile("triton", gm, examples).path)
    results = compile_in_subprocess(paths)
    assert results and all(v == "ok" for v in results.values()), results


def test_cpp_symbolic_row_cache():
    """A symbolic C++ softmax keeps exp(x - max) in a per-thread row cache (planned at the
    hint, grown for longer rows) instead of computing it twice, and runs serially (as a
    static kernel of its size does) below the parallel threshold: one nest, a rows function
    the OpenMP team shares by ranges for enough work and one thread runs otherwise."""
    fn, make_inputs, dynamic = TWO["softmax"]
    gm, examples = symbolic_graph(fn, make_inputs(*TRACED), dynamic)
    compiled = _compile("cpp", gm, examples)
    assert "static thread_local std::vector<float> row_cache0_store;" in compiled.cpp_source
    assert compiled.cpp_source.count("surge_expf(") == 1 and "if (s0*s1 >= 32768) {" in compiled.cpp_source
    assert "_rows(" in compiled.cpp_source and "surge_thread_range(" in compiled.cpp_source
    run_at_sizes(fn, compiled, make_inputs, [(3, 7), (4, 300), (9, 2), (2, 1000)])


def test_symbolic_divisions_exact_on_the_loop_domain_are_removed():
    """A transposed view read back through a reshape: its floor divisions and modulos are
    exact for every size on the loop domain, so the C++ index is affine (no division per
    element); one that is not exact everywhere stays."""
    from surge.codegen.cpp.affine_index import symbolic_affine_index
    from surge.lowering.sizes import FloorDiv, Mod, index_symbol

    sv = SizeVars()
    s0, s1 = sv.new_symbol(2), sv.new_symbol(32)
    x0, x1, x2, x3 = (index_symbol("x", k) for k in range(4))
    loops = {"x0": s0, "x1": sympy.Integer(2), "x2": s1, "x3": sympy.Integer(16)}
    index = 16 * x1 + x3 + 96 * s1 * FloorDiv(16 * x1 + 32 * x2 + x3 + 32 * x0 * s1, 32 * s1) \
        + 96 * Mod(x2 + x0 * s1, s1)
    assert symbolic_affine_index(index, loops, sv) == 16 * x1 + x3 + 96 * s1 * x0 + 96 * x2
    kept = Mod(x2 + 1, s1)   # x2 + 1 reaches s1 on the domain
    assert symbolic_affine_index(kept, loops, sv) == kept
