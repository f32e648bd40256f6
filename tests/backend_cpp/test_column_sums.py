"""Column sums inside row kernels: per-thread partials (surge/codegen/cpp/column_sums.py).

The LayerNorm weight/bias gradients and a Linear's bias gradient are sums over rows of
values the LayerNorm-backward row kernel computes; the cpp backend adds them up in that
kernel (schedule/column_fusion.py). These programs check the results against eager on
odd sizes, several row dims, float64/bfloat16, NaN/inf, one and two threads, the
serial path of small kernels, and sums that need the row's reductions first.
"""
import pytest
import torch
import torch.nn as nn

import surge

from tests.backend.test_column_fusion import layer_norm_gelu_backward

from .helpers import assert_matches_eager, compile_cases, randn


def _ln(rows, cols, dtype=torch.float32, lead=()):
    def make():
        x, g = randn(*lead, rows, cols, dtype=dtype), randn(*lead, rows, cols, dtype=dtype)
        return x, randn(cols, dtype=dtype), randn(cols, dtype=dtype), g
    return make


def ln_backward_3d(x, w, b, gy):
    """The same backward over [batch, seq, features]: the sums run over two row dims."""
    dx, gw, gb, gbias = layer_norm_gelu_backward(x.flatten(0, 1), w, b, gy.flatten(0, 1))
    return dx.view_as(x), gw, gb, gbias


def scaled_column_sum(x, gy):
    """A column sum that needs the row's reduction (it accumulates in the row's last pass)."""
    s = gy / (x * x).sum(-1, keepdim=True)
    return s, (s * x).sum(0)


def _special(rows, cols):
    def make():
        x, w, b, g = _ln(rows, cols)()
        g[3, 5] = float("nan")
        g[7, 1] = float("inf")
        return x, w, b, g
    return make


CASES = {
    "ln_large": (layer_norm_gelu_backward, _ln(300, 200)),        # parallel: 60000 elements of work
    "ln_small": (layer_norm_gelu_backward, _ln(13, 24)),          # one thread, no OpenMP region
    "ln_odd": (layer_norm_gelu_backward, _ln(257, 131)),
    "ln_3d": (ln_backward_3d, _ln(80, 160, lead=(3,))),
    "ln_f64": (layer_norm_gelu_backward, _ln(150, 230, torch.float64)),
    "ln_bf16": (layer_norm_gelu_backward, _ln(150, 230, torch.bfloat16)),
    "ln_special": (layer_norm_gelu_backward, _special(160, 220)),
    "scaled": (scaled_column_sum, lambda: (randn(190, 180), randn(190, 180))),
}
TOL = {"ln_bf16": dict(atol=0.3, rtol=5e-2), "ln_f64": dict(atol=1e-10, rtol=1e-10)}


@pytest.fixture(scope="module")
def compiled():
    return compile_cases(CASES)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name, threads):
    fn, make_inputs = CASES[name]
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert_matches_eager(fn, compiled[name], *make_inputs(), **TOL.get(name, dict(atol=1e-4, rtol=1e-4)))
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("name", ["ln_large", "ln_odd", "ln_3d", "ln_f64", "ln_bf16", "scaled"])
def test_one_kernel_holds_the_row_work_and_the_column_sums(compiled, name):
    c = compiled[name]
    assert len(c.kernel_names) == 1
    source = c.cpp_source
    assert source.count("std::vector<") == (1 if name == "scaled" else 3)   # partials per column sum
    assert "#pragma omp parallel\n" in source and "#pragma omp for schedule(static)" in source
    assert "xb += 64" not in source   # no separate column-reduction kernel


def test_small_kernels_run_the_rows_on_one_thread(compiled):
    source = compiled["ln_small"].cpp_source
    assert "const int64_t col_threads = 1;" in source
    assert "omp parallel" not in source and "omp for" not in source


def test_results_do_not_depend_on_timing(compiled):
    fn, make_inputs = CASES["ln_large"]
    inputs = make_inputs()
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        first = compiled["ln_large"](*inputs)
        for _ in range(3):
            for a, b in zip(first, compiled["ln_large"](*inputs)):
                assert torch.equal(a, b)
    finally:
        torch.set_num_threads(old)


class Block(nn.Module):
    """Linear -> LayerNorm -> GELU over [batch, seq, features], as a transformer's MLP half."""

    def __init__(self, width):
        super().__init__()
        self.fc, self.norm, self.act = nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()

    def forward(self, x):
        return self.act(self.norm(self.fc(x))) + x


@pytest.mark.parametrize("threads", [1, 2])
def test_training_gradients_match_eager(threads):
    torch.manual_seed(0)
    model, ref = nn.Sequential(Block(136), Block(136)), nn.Sequential(Block(136), Block(136))
    ref.load_state_dict(model.state_dict())
    compiled = surge.compile(model, backend="cpp", fullgraph=True)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.randn(3, 70, 136)
        compiled(x).square().mean().backward()
        ref(x).square().mean().backward()
    finally:
        torch.set_num_threads(old)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


def _update_beside_column_sums(x, p, g):
    """An in-place update of an input (stored into the input by its kernel) in a graph
    whose column sum moves into a row kernel."""
    p.add_(g * 0.1)
    return (x * 2 + 1).sum(0), (x * 3).sum(1)


def test_a_kernel_storing_into_a_mutated_input_survives_column_fusion():
    compiled = surge.compile(_update_beside_column_sums, backend="cpp",
                             options={"graph_cache": False, "raise_internal_errors": True})
    for _ in range(2):
        x, p, g = randn(64, 32), randn(64, 32), randn(64, 32)
        mine, theirs = p.clone(), p.clone()
        got, want = compiled(x, mine, g), _update_beside_column_sums(x, theirs, g)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(mine, theirs)
