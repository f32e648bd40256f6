"""16-bit matmuls with misaligned sizes run on zero-padded operands (lowering/matmul_padding.py).

On CPU the padding is off by default and the sizes are too small to pay, so these
tests switch it on and make every size "worth padding"; the result must equal
eager's and keep the padded output's rows (a view, as torch.compile returns it).
"""
import pytest
import sympy
import torch

import surge
from surge.backends.cpp import compile_aten_graph_cpp
from surge.lowering import matmul_padding
from surge.lowering.ir import ComputedBuffer, ExternBuffer
from surge.lowering.lower import lower_graph
from surge.lowering.ops_view import view_strides
from surge.lowering.size_vars import SizeVars
from surge.options import CompileConfig, Options

from .helpers import DEVICE, aten_graph, compile_fn, randn

PAD = Options(pad_matmuls=True, graph_cache=False)


@pytest.fixture
def always_worth(monkeypatch):
    monkeypatch.setattr(matmul_padding, "worth_padding", lambda *args: True)


def lm_head(x, w):
    return torch.nn.functional.linear(x, w)


def linear_scaled(x, w, b):
    return torch.nn.functional.linear(x, w, b) * 2


def _externs(fn, *inputs, pad=True):
    graph, _ = lower_graph(aten_graph(fn, *inputs), list(inputs), config=CompileConfig(pad_matmuls=pad))
    return graph, [b for b in graph.buffers if isinstance(b, ExternBuffer)]


def _compilers():
    yield lambda fn, *a: compile_fn(fn, *a, options=PAD)
    if DEVICE == "cpu":   # the cpp backend runs CPU tensors only
        yield lambda fn, *a: compile_aten_graph_cpp(aten_graph(fn, *a), list(a), PAD)


def _first(out):
    return out[0] if isinstance(out, (list, tuple)) else out


@pytest.mark.parametrize("m,k,n", [(6, 13, 21), (5, 16, 19), (4, 12, 16)])
def test_padded_matmul_matches_eager_and_keeps_padded_rows(always_worth, m, k, n):
    x, w, b = randn(2, m, k, dtype=torch.bfloat16), randn(n, k, dtype=torch.bfloat16), randn(n, dtype=torch.bfloat16)
    n_pad = -(-n // 8) * 8
    for compile_with in _compilers():
        out = _first(compile_with(lm_head, x, w)(x, w))
        torch.testing.assert_close(out, lm_head(x, w), rtol=2e-2, atol=2e-2)
        assert out.stride() == (m * n_pad, n_pad, 1)
        biased = _first(compile_with(linear_scaled, x, w, b)(x, w, b))
        torch.testing.assert_close(biased, linear_scaled(x, w, b), rtol=2e-2, atol=2e-2)


def test_padding_adds_copy_kernels_and_one_aligned_matmul(always_worth):
    x, w = randn(8, 13, dtype=torch.bfloat16), randn(21, 13, dtype=torch.bfloat16)
    graph, externs = _externs(lm_head, x, w)
    (mm,) = externs
    assert [int(s) for s in mm.layout.shape] == [8, 24]
    a, b = mm.args
    padded = {buf.name: buf for buf in graph.buffers}
    assert [int(s) for s in padded[a.buffer].layout.shape] == [8, 16]
    # the transposed weight is padded as the (N, K) matrix it is in memory, and read transposed
    assert [int(s) for s in padded[b.buffer].layout.shape] == [24, 16]
    assert [int(s) for s in b.layout.stride] == [1, 16]


def test_no_padding_when_aligned_off_or_not_16_bit(always_worth):
    x, w = randn(8, 16, dtype=torch.bfloat16), randn(24, 16, dtype=torch.bfloat16)
    assert [int(s) for s in _externs(lm_head, x, w)[1][0].layout.shape] == [8, 24]
    x, w = randn(8, 13, dtype=torch.bfloat16), randn(21, 13, dtype=torch.bfloat16)
    assert [int(s) for s in _externs(lm_head, x, w, pad=False)[1][0].layout.shape] == [8, 21]
    x, w = randn(8, 13), randn(21, 13)
    assert [int(s) for s in _externs(lm_head, x, w)[1][0].layout.shape] == [8, 21]


def test_padding_is_off_on_cpu_by_default():
    x, w = torch.randn(8, 13, dtype=torch.bfloat16), torch.randn(21, 13, dtype=torch.bfloat16)
    graph, _ = lower_graph(aten_graph(lm_head, x, w), [x, w])
    assert not any(isinstance(b, ComputedBuffer) for b in graph.buffers)   # no padding copies
    assert [int(s) for b in graph.buffers if isinstance(b, ExternBuffer) for s in b.layout.shape] == [8, 21]


def test_worth_padding_decides_by_size():
    # GPT-2's lm head over 8192 tokens pads (6.7 ms misaligned vs 0.9 ms on an H200) ...
    assert matmul_padding.worth_padding(8192, 768, 50257, False, True, 2)
    # ... and so do 16 rows (0.106 vs 0.069 ms: the misaligned kernel reads slowly too);
    assert matmul_padding.worth_padding(16, 768, 50257, False, True, 2)
    # one decoding step does not (a matrix-vector kernel, fast on misaligned rows), nor
    # matmuls too small for the copies' launches (512x1000x1000: 0.019 vs 0.043 ms)
    assert not matmul_padding.worth_padding(1, 768, 50257, False, True, 2)
    assert not matmul_padding.worth_padding(512, 1000, 1000, True, True, 2)
    assert not matmul_padding.worth_padding(64, 13, 21, True, True, 2)


def _random_strided(gen):
    """A tensor with gaps between rows and permuted dims (a view of a bigger buffer)."""
    ndim = int(torch.randint(1, 5, (), generator=gen))
    shape = [int(torch.randint(1, 5, (), generator=gen)) for _ in range(ndim)]
    base = torch.empty([s + int(torch.randint(0, 2, (), generator=gen)) for s in shape])
    view = base[tuple(slice(0, s) for s in shape)]
    return view.permute(*torch.randperm(ndim, generator=gen).tolist())


def test_view_strides_agree_with_torch_views():
    gen = torch.Generator().manual_seed(0)
    viewable = 0
    for _ in range(600):
        t = _random_strided(gen)
        shapes = [[t.numel()], list(reversed(t.shape))]
        if t.ndim >= 2:
            shapes.append([t.shape[0] * t.shape[1], *t.shape[2:]])
            shapes.append([*t.shape[:-1], 1, t.shape[-1]])
        for new_shape in shapes:
            try:
                expected = t.view(new_shape).stride()
            except RuntimeError:
                expected = None
            got = view_strides(SizeVars(), *[[sympy.Integer(v) for v in seq] for seq in (t.shape, t.stride(), new_shape)])
            if expected is None:
                assert got is None, (t.shape, t.stride(), new_shape)
                continue
            assert got is not None, (t.shape, t.stride(), new_shape)
            assert all(int(g) == e for g, e, s in zip(got, expected, new_shape) if s != 1)
            viewable += 1
    assert viewable > 300


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpt2_lm_head_is_padded_on_cuda():
    x = torch.randn(8, 1024, 768, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(50257, 768, device="cuda", dtype=torch.bfloat16)
    out = compile_fn(lm_head, x, w)(x, w)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert out.stride() == (1024 * 50264, 50264, 1)
    torch.testing.assert_close(out, lm_head(x, w), rtol=2e-2, atol=2e-2)


def lm_head_log_softmax(x, w):
    return torch.log_softmax(torch.nn.functional.linear(x, w).float(), dim=-1)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_padded_output_saved_for_the_backward_keeps_its_traced_layout(always_worth, backend):
    """The backward was compiled for the saved logits' traced (contiguous) layout: the
    forward hands them over in it, not as the padded view it returns to callers."""
    if backend == "cpp" and DEVICE != "cpu":
        pytest.skip("the cpp backend runs CPU tensors")
    x = randn(4, 13, dtype=torch.bfloat16).requires_grad_()
    w = randn(21, 13, dtype=torch.bfloat16).requires_grad_()
    compiled = surge.compile(lm_head_log_softmax, backend=backend, options={"pad_matmuls": True, "graph_cache": False})
    out = compiled(x, w)
    grad = torch.randn_like(out)
    gx, gw = torch.autograd.grad(out, (x, w), grad)
    ref = lm_head_log_softmax(x, w)
    rx, rw = torch.autograd.grad(ref, (x, w), grad)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(gx, rx, rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(gw, rw, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("backend", ["cpp", "triton"] if DEVICE == "cpu" else ["triton"])
def test_a_symbolic_row_count_keeps_the_padding(always_worth, monkeypatch, backend):
    # a language model's head over a varying sequence length: the rows are symbolic, the
    # vocabulary (N) and width (K) are not, so the aligned matmul still applies
    plans = []
    plan = matmul_padding._plan
    monkeypatch.setattr(matmul_padding, "_plan", lambda *args: plans.append(plan(*args)) or plans[-1])
    w, b = randn(21, 13, dtype=torch.bfloat16), randn(21, dtype=torch.bfloat16)
    head = surge.compile(lm_head, backend=backend, options={"pad_matmuls": True})
    scaled = surge.compile(linear_scaled, backend=backend, options={"pad_matmuls": True})
    for t in (5, 9, 17):
        x = randn(2, t, 13, dtype=torch.bfloat16)
        torch.testing.assert_close(head(x, w), lm_head(x, w), rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(scaled(x, w, b), linear_scaled(x, w, b), rtol=2e-2, atol=2e-2)
    # a static graph, then one of a symbolic length (automatic dynamic), per function
    assert surge.counters["graphs"] == 4 and surge.counters["static_fallbacks"] == 0
    symbolic = [p for p in plans if not isinstance(p[0], int) and not getattr(p[0], "is_Integer", False)]
    assert len(symbolic) == 2 and all(p[3:] == (16, 24) for p in symbolic)   # K and N padded, rows as they are
