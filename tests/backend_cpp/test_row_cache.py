"""Values that several passes over a row need are computed once per element and kept in a
per-row scratch array (softmax's exp): the generated source, and results equal to eager,
NaN and inf rows included."""
import torch

from .helpers import assert_matches_eager, compile_cases, randn

NAN, INF = float("nan"), float("inf")


def softmax(x):
    return torch.softmax(x, -1)


def _softmax_rows_with_specials():
    x = randn(64, 300)
    x[1, 7] = NAN
    x[2, :] = -INF
    x[3, 5] = INF
    x[4, 9] = -INF
    return (x,)


CASES = {
    "softmax": (softmax, lambda: (randn(300, 257),)),
    "softmax_specials": (softmax, _softmax_rows_with_specials),
    # a row of 20000 floats (80 KB) is past the scratch budget: exp is computed twice instead
    "softmax_long_rows": (softmax, lambda: (randn(3, 20000),)),
    # the variance's two passes and the output share exp(x)
    "var_of_exp": (lambda x: (torch.exp(x).var(-1, keepdim=True) * torch.exp(x)), lambda: (randn(40, 77),)),
    # two r dims (a transposed input: dims 1 and 2 do not merge)
    "two_reduced_dims": (lambda x: torch.tanh(x) / torch.tanh(x).sum((1, 2), keepdim=True),
                         lambda: (randn(5, 7, 6).transpose(1, 2),)),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), lambda: (randn(50, 129),)),
    "layer_norm": (lambda x: torch.nn.functional.layer_norm(x, (96,)), lambda: (randn(33, 96),)),
}


def _compiled():
    if not hasattr(_compiled, "built"):
        _compiled.built = compile_cases(CASES)
    return _compiled.built


def test_results_match_eager():
    built = _compiled()
    for name, (fn, make_inputs) in CASES.items():
        assert_matches_eager(fn, built[name], *make_inputs(), atol=1e-5, rtol=1e-5)


def test_softmax_computes_exp_once_per_element():
    src = _compiled()["softmax"].cpp_source
    assert src.count("surge_expf(") == 1, src
    assert "alignas(64) float row_cache0[257];" in src
    assert src.count("row_cache0[r0] = ") == 1 and src.count("= row_cache0[r0];") == 1


def test_long_rows_recompute_instead_of_caching():
    src = _compiled()["softmax_long_rows"].cpp_source
    assert "row_cache" not in src and src.count("surge_expf(") == 2


def test_variance_passes_reuse_the_cached_value():
    src = _compiled()["var_of_exp"].cpp_source
    assert src.count("surge_expf(") == 1 and "row_cache0[r0] = " in src


def test_two_reduced_dims_index_the_cache_by_the_linear_r_index():
    src = _compiled()["two_reduced_dims"].cpp_source
    assert src.count("std::tanh(") == 1 and "row_cache0[r0 * 7 + r1] = " in src, src


def test_nothing_costly_shared_means_no_cache():
    for name in ("log_softmax", "layer_norm"):
        assert "row_cache" not in _compiled()[name].cpp_source, name
