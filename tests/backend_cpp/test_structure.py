"""Structure: the kernels, segments and extern calls typical programs become, and their results."""
import pytest
import torch
import torch.nn.functional as F

from tests.backend.structure_programs import gelu_linear, layer_norm_gelu, pointwise_chain, rms_norm, softmax

from .helpers import assert_matches_eager, compile_cases, randn

aten = torch.ops.aten


def attention_of_split_views(x, w):
    """The extern attention's output strides follow its inputs', which the schedule realizes
    contiguous although the traced ones were transposed views."""
    b, t, c = x.shape
    q, k, v = (x @ w).split(c, dim=2)
    q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(b, t, c) * 2


def two_matmuls(x, w1, w2):
    return torch.relu(x @ w1) @ w2 * 0.5


CASES = {
    "gelu_linear": (gelu_linear, lambda: (randn(8, 32), randn(32, 16), randn(16), randn(8, 16))),
    "layer_norm_gelu": (layer_norm_gelu, lambda: (randn(64, 48), randn(48), randn(48))),
    "softmax": (softmax, lambda: (randn(5, 37),)),
    "softmax_big": (softmax, lambda: (randn(300, 257),)),
    "rms_norm_bf16": (rms_norm, lambda: (randn(4, 64, dtype=torch.bfloat16), randn(64, dtype=torch.bfloat16))),
    "pointwise_chain": (pointwise_chain, lambda: (randn(7, 9), randn(9))),
    "attention_of_split_views": (attention_of_split_views, lambda: (randn(2, 5, 16), randn(16, 48))),
    "two_matmuls": (two_matmuls, lambda: (randn(6, 8), randn(8, 5), randn(5, 3))),
}
TOL = {"rms_norm_bf16": dict(atol=2e-2, rtol=2e-2), "attention_of_split_views": dict(atol=1e-4, rtol=1e-4)}


@pytest.fixture(scope="module")
def compiled():
    return compile_cases(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name):
    fn, make_inputs = CASES[name]
    assert_matches_eager(fn, compiled[name], *make_inputs(), **TOL.get(name, {}))


def _externs(c):
    return [s.buffer.op for s in c.schedule.externs]


def test_gelu_of_linear_is_one_extern_matmul_and_one_kernel(compiled):
    c = compiled["gelu_linear"]
    assert _externs(c) == [aten.mm.default]
    assert [n.split("_", 1)[1] for n in c.kernel_names] == ["cpp_fused_add_gelu_0"]


def test_layer_norm_gelu_is_one_kernel_with_statistics_in_registers(compiled):
    c = compiled["layer_norm_gelu"]
    assert len(c.kernel_names) == 1 and not _externs(c)
    assert c.schedule.kernels[0].internal, "the statistics stay in registers"
    assert c.cpp_source.count("] = ") == 1, "only the result reaches memory"


def test_softmax_is_one_kernel(compiled):
    for name in ("softmax", "softmax_big"):
        c = compiled[name]
        assert len(c.kernel_names) == 1
    assert "#pragma omp parallel for" in compiled["softmax_big"].cpp_source


def test_rms_norm_with_casts_is_one_kernel_computed_in_fp32(compiled):
    c = compiled["rms_norm_bf16"]
    assert len(c.kernel_names) == 1 and not _externs(c)
    assert "surge_bf16_to_float(in" in c.cpp_source, "bf16 loads convert up to float"
    assert "surge_bf16_to_float(surge_float_to_bf16(" in c.cpp_source, "the explicit cast rounds"


def test_sixty_pointwise_ops_are_one_kernel_one_store(compiled):
    c = compiled["pointwise_chain"]
    assert len(c.kernel_names) == 1
    assert c.cpp_source.count("] = ") == 1, "no intermediate reaches memory"


def test_one_cpp_call_per_run_of_kernels(compiled):
    """The host code calls C++ once per run of kernels between extern calls (relu | mm | mul: 2)."""
    for name, want in (("layer_norm_gelu", 1), ("gelu_linear", 1), ("two_matmuls", 2)):
        body = compiled[name].source.split("def call(args):")[1]
        assert body.count("segment_") == want, (name, body)
    assert [str(op) for op in _externs(compiled["two_matmuls"])] == ["aten.mm.default"] * 2


def test_contiguous_extern_results_need_no_layout_check(compiled):
    """Decomposed attention is bmm's, whose results are always contiguous: no check after
    them (ops without that guarantee keep it: test_host_calls.py)."""
    body = compiled["attention_of_split_views"].source.split("def call(args):")[1]
    assert "bmm_default_public(" in body and ".stride() != " not in body


def test_attention_of_split_views_through_surge_compile():
    """Through surge's own aot layer the attention's traced output strides are the transposed
    ones; the realized, contiguous inputs make ATen return contiguous strides instead."""
    import surge

    compiled = surge.compile(attention_of_split_views, backend="cpp")
    for _ in range(2):
        x, w = randn(2, 5, 16), randn(16, 48)
        torch.testing.assert_close(compiled(x, w), attention_of_split_views(x, w), atol=1e-4, rtol=1e-4)
