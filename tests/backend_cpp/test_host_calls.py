"""The cpp host code's cheap extern calls: same ATen overloads, results, errors and layouts.

The host module calls ATen through public torch functions, ``linear`` for matmuls with a
transposed weight, and without views where it allocated a buffer in its readers' layout
(``codegen/extern_callees.py``, ``codegen/cpp/extern_calls.py``, ``host_layouts.py``). Each
shortcut must reach exactly the overload the graph names: checked here under a dispatch mode, and end to end against eager.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

from surge.codegen.cpp.extern_calls import CONTIGUOUS_RESULTS
from surge.codegen.extern_callees import PUBLIC_FUNCTIONS
from surge.codegen.cpp.host_layouts import extent, host_layouts, is_transpose
from surge.lowering.ir import Layout

from .helpers import assert_matches_eager, compile_cases, randn

aten = torch.ops.aten
public = torch._C._VariableFunctions


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def recorded(fn, *args, **kwargs):
    with Recorder() as rec:
        out = fn(*args, **kwargs)
    return rec.ops, out


def _sdpa_args():
    q, k, v = (randn(2, 3, 8, 16) for _ in range(3))
    return (q, k, v, 0.0, True), {"scale": 0.25}


# arguments in the forms ATen graphs pass them, for every PUBLIC_FUNCTIONS entry
SAMPLES = {
    aten.mm.default: lambda: ((randn(3, 4), randn(5, 4).t()), {}),
    aten.addmm.default: lambda: ((randn(5), randn(3, 4), randn(4, 5)), {"beta": 1, "alpha": 1}),
    aten.bmm.default: lambda: ((randn(2, 3, 4), randn(2, 4, 5)), {}),
    aten.baddbmm.default: lambda: ((randn(2, 3, 5), randn(2, 3, 4), randn(2, 4, 5)), {"beta": 0.5, "alpha": 2.0}),
    aten.cumsum.default: lambda: ((randn(3, 4), 1), {"dtype": torch.float64}),
    aten.slice_scatter.default: lambda: ((randn(4, 6), randn(4, 3), 1, 3, 9223372036854775807), {}),
    aten.convolution.default: lambda: ((randn(1, 2, 5, 5), randn(3, 2, 3, 3), randn(3), [1, 1], [1, 1], [1, 1],
                                        False, [0, 0], 1), {}),
    aten._scaled_dot_product_flash_attention_for_cpu.default: _sdpa_args,
}


def test_every_public_function_has_a_sample():
    assert set(SAMPLES) == set(PUBLIC_FUNCTIONS)


@pytest.mark.parametrize("op", list(PUBLIC_FUNCTIONS), ids=str)
def test_public_function_reaches_exactly_the_overload(op):
    args, kwargs = SAMPLES[op]()
    ops, fast = recorded(getattr(public, PUBLIC_FUNCTIONS[op]), *args, **kwargs)
    assert ops == [op]
    slow = op(*args, **kwargs)
    for a, b in zip(fast if isinstance(fast, tuple) else (fast,), slow if isinstance(slow, tuple) else (slow,)):
        assert torch.equal(a, b) and a.stride() == b.stride()


def test_public_function_raises_what_the_overload_raises():
    for op, args in ((aten.mm.default, (randn(3, 4), randn(5, 4))),
                     (aten.bmm.default, (randn(2, 3, 4), randn(3, 4, 5))),
                     (aten.addmm.default, (randn(7), randn(3, 4), randn(4, 5)))):
        with pytest.raises(RuntimeError) as slow:
            op(*args)
        with pytest.raises(RuntimeError) as fast:
            getattr(public, PUBLIC_FUNCTIONS[op])(*args)
        assert str(fast.value) == str(slow.value)


def test_linear_is_addmm_or_mm_of_the_transposed_weight():
    x, w, b = randn(6, 4), randn(5, 4), randn(5)
    ops, out = recorded(torch._C._nn.linear, x, w, b)
    assert ops == [aten.t.default, aten.addmm.default]
    assert torch.equal(out, aten.addmm.default(b, x, w.t()))
    ops, out = recorded(torch._C._nn.linear, x, w)
    assert ops == [aten.t.default, aten.mm.default]
    assert torch.equal(out, aten.mm.default(x, w.t()))
    with pytest.raises(RuntimeError) as slow:
        aten.addmm.default(b, x, randn(5, 3).t())
    with pytest.raises(RuntimeError) as fast:
        torch._C._nn.linear(x, randn(5, 3), b)
    assert str(fast.value) == str(slow.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_contiguous_results_are_contiguous(dtype):
    """The host skips the layout check after these ops: whatever the operands' layouts."""
    def r(*s):
        return randn(*s, dtype=dtype)

    operands = {
        aten.mm.default: [(r(3, 4), r(4, 5)), (r(4, 3).t(), r(5, 4).t()), (r(3, 8)[:, ::2], r(1, 5).expand(4, 5))],
        aten.addmm.default: [(r(5), r(3, 4), r(4, 5)), (r(3, 1).expand(3, 5), r(4, 3).t(), r(5, 4).t()),
                             (r(5, 3).t(), r(3, 4), r(4, 5))],
        aten.bmm.default: [(r(2, 3, 4), r(2, 4, 5)), (r(2, 4, 3).transpose(1, 2), r(4, 2, 5).transpose(0, 1)),
                           (r(1, 3, 4).expand(2, 3, 4), r(2, 5, 4).transpose(1, 2))],
    }
    assert set(operands) == CONTIGUOUS_RESULTS
    for op, cases in operands.items():
        for args in cases:
            out = op(*args)
            assert out.is_contiguous() and out.storage_offset() == 0
            assert out.stride() == Layout.contiguous(out.shape).stride


def test_layout_helpers():
    lay = Layout((3, 4), (4, 1))
    assert extent(lay) == 12 and extent(Layout((0, 4), (4, 1))) == 0
    assert is_transpose(Layout((4, 3), (1, 4)), lay) and not is_transpose(Layout((4, 3), (3, 1)), lay)


# -- end to end: host modules built from ATen graphs ---------------------------------------

def linear_gelu(x, w, b):
    return F.gelu(F.linear(F.layer_norm(x, x.shape[-1:]), w, b))


def view_then_matmul(x, w):
    """A kernel's output read by an extern as a 2-D view: allocated in that layout, no view."""
    return (torch.relu(x).view(-1, x.shape[-1]) @ w) * 2


def output_and_view(x, w):
    """One buffer both returned in its own layout and read through another by an extern."""
    y = torch.relu(x)
    return y, y.view(2, 12) @ w, y.t() @ w[:4]


def attention_of_split_views(x, w):
    """CPU flash attention's output strides follow its inputs', which the schedule realizes
    otherwise than traced: the host restrides the result."""
    b, t, c = x.shape
    q, k, v = (x @ w).split(c, dim=2)
    q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(b, t, c) * 2


def cumsum_relu(x):
    return torch.relu(torch.cumsum(torch.relu(x) * 2, dim=1))


CASES = {
    "linear_gelu": (linear_gelu, lambda: (randn(2, 8, 16), randn(24, 16), randn(24))),
    "view_then_matmul": (view_then_matmul, lambda: (randn(2, 3, 8), randn(8, 5))),
    "output_and_view": (output_and_view, lambda: (randn(4, 6), randn(12, 3))),
    "cumsum_relu": (cumsum_relu, lambda: (randn(5, 7),)),
}


@pytest.fixture(scope="module")
def compiled():
    return compile_cases(CASES)


def _body(compiled_graph) -> str:
    return compiled_graph.source.split("def call(args):")[1]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_with_eager_layouts(compiled, name):
    fn, make_inputs = CASES[name]
    for _ in range(2):
        inputs = make_inputs()
        assert_matches_eager(fn, compiled[name], *inputs, atol=1e-5, rtol=1e-5)
        for a, e in zip(_tuple(compiled[name](*inputs)), _tuple(fn(*inputs))):
            assert a.stride() == e.stride()


def _tuple(x):
    return x if isinstance(x, (tuple, list)) else (x,)


def test_linear_with_a_transposed_weight_input(compiled):
    body = _body(compiled["linear_gelu"])
    assert "linear(" in body and "as_strided(" not in body.split("linear(")[1].split("\n")[0]
    assert ".stride() != " not in body, "addmm's result is contiguous: no layout check"


def test_kernel_output_allocated_in_its_readers_layout(compiled):
    body = _body(compiled["view_then_matmul"])
    assert "as_strided(buf" not in body, body


def test_output_keeps_its_layout_when_an_extern_reads_it_otherwise(compiled):
    fn, make_inputs = CASES["output_and_view"]
    x, w = make_inputs()
    y, _, _ = compiled["output_and_view"](x, w)
    assert y.shape == (4, 6) and y.stride() == (6, 1)


def test_other_overloads_are_called_through_their_bound_function(compiled):
    source = compiled["cumsum_relu"].source
    assert "aten_cumsum_default_public = torch._C._VariableFunctions.cumsum" in source
    assert "torch.ops.aten" not in _body(compiled["cumsum_relu"])


def test_bound_overload_function_is_what_the_overload_calls():
    from surge.codegen.cpp.extern_calls import BINDINGS_PRELUDE

    namespace = {"torch": torch}
    exec(BINDINGS_PRELUDE, namespace)
    op = aten.embedding_dense_backward.default
    bound = namespace["overload_function"](op)
    grad, idx = randn(5, 3), torch.tensor([0, 2, 2, 1, 0])
    assert torch.equal(bound(grad, idx, 4, -1, False), op(grad, idx, 4, -1, False))
    ops, _ = recorded(bound, grad, idx, 4, -1, False)
    assert ops == [op]


def test_extern_result_in_another_layout_is_restrided():
    """An extern op whose result comes back in another layout than traced (here: attention
    made to return its output with permuted strides, same values) is copied into the traced
    layout before kernels read it: restride runs and the result equals eager's."""
    x, w = randn(2, 5, 16), randn(16, 48)
    gm = make_fx(attention_of_split_views)(x, w)   # attention stays one op
    from surge.backends.cpp import compile_aten_graph_cpp

    graph = compile_aten_graph_cpp(gm, [x, w])
    module = graph.module
    name = "aten__scaled_dot_product_flash_attention_for_cpu_default_public"
    assert f"= {name}(" in _body(graph) and "restride(" in _body(graph)
    attention, restride, calls = getattr(module, name), module.restride, []

    def permuted_attention(*args, **kwargs):
        out, *rest = attention(*args, **kwargs)
        return (out.permute(3, 2, 1, 0).contiguous().permute(3, 2, 1, 0), *rest)

    def counting_restride(t, *layout):
        calls.append(layout)
        return restride(t, *layout)

    module.restride = counting_restride
    setattr(module, name, permuted_attention)
    try:
        for _ in range(2):
            x, w = randn(2, 5, 16), randn(16, 48)
            torch.testing.assert_close(graph(x, w), attention_of_split_views(x, w), atol=1e-5, rtol=1e-5)
    finally:
        module.restride = restride
        setattr(module, name, attention)
    assert calls, "the attention's result was restrided"
