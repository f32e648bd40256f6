"""The generated code's own float math in the prelude against float64: ``surge_expf`` over
every magnitude a float can take (within 1 ulp, inf/NaN/-0.0 and subnormal results as
eager), and exact GELU's one-formula forms (``surge_one_plus_erf``, ``surge_normal_cdf``)."""
import torch
import torch.nn.functional as F

from .helpers import compile_cases

NAN, INF = float("nan"), float("inf")
EDGES = [NAN, INF, -INF, 0.0, -0.0, 88.72283, 88.72284, 88.7229, 89.0, 1e10, -87.33654, -100.0, -103.97,
         -103.98, -104.0, -1e10, 1e-30, -1e-30, 1e-45, -3e38, 3e38]


def _wide_inputs():
    # every 997th float bit pattern between -110 and 95 (about 2 million), then the edges
    bits = torch.arange(0, 2**32, 997, dtype=torch.int64)
    x = (bits - (bits >= 2**31).long() * 2**32).to(torch.int32).view(torch.float32)
    x = x[(x > -110) & (x < 95)]
    return (torch.cat([x, torch.tensor(EDGES)]),)


def _ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in units in the last place between float32 tensors (same-sign ordering)."""
    def ordered(t):
        i = t.view(torch.int32).long()
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)
    return (ordered(a) - ordered(b)).abs()


def _gelu_inputs():
    x = torch.linspace(-12, 12, 1 << 20)
    return (torch.cat([x, torch.tensor([NAN, -INF, 0.0, -0.0, 1e-40, -1e-40, 1e30, -1e30, -5.0, 3.0])]),)


def gelu_by_formula(x):
    return 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))


CASES = {
    "gelu": (F.gelu, _gelu_inputs),
    "gelu_by_formula": (gelu_by_formula, _gelu_inputs),
    "exp": (torch.exp, _wide_inputs),
    "sigmoid": (torch.sigmoid, _wide_inputs),
    "masked_exp": (lambda x: torch.exp(torch.where(torch.arange(x.numel()) % 3 == 0, -INF, x)), _wide_inputs),
}


def _compiled():
    if not hasattr(_compiled, "built"):
        _compiled.built = compile_cases(CASES)
    return _compiled.built


def test_exp_is_within_one_ulp_of_float64_everywhere():
    (x,) = _wide_inputs()
    got = _compiled()["exp"](x)
    assert "surge_expf(" in _compiled()["exp"].cpp_source
    want = torch.exp(x.double()).float()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert int(_ulps(got[~nan], want[~nan]).max()) <= 1
    assert torch.equal(got[x == -INF], torch.zeros_like(got[x == -INF]))
    assert bool((got[(x > 88.7229) & ~x.isnan()] == INF).all())


def test_exp_with_minus_inf_lanes_matches_eager():
    (x,) = _wide_inputs()
    fn = CASES["masked_exp"][0]
    got, want = _compiled()["masked_exp"](x), fn(x)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got == 0, want == 0)
    ok = ~want.isnan()
    assert int(_ulps(got[ok], want[ok]).max()) <= 2


def test_sigmoid_through_own_exp_matches_eager():
    (x,) = _wide_inputs()
    got, want = _compiled()["sigmoid"](x), torch.sigmoid(x)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=3e-7, atol=1e-38)


def test_exact_gelu_through_one_formula_is_as_accurate_as_eager():
    """GELU's ``1 + erf`` (and ``0.5 * (1 + erf(x / sqrt 2))``) run as one branch-free
    formula: error against float64 at most eager's, without eager's cancellation below 0."""
    (x,) = _gelu_inputs()
    assert "surge_normal_cdf(" in _compiled()["gelu"].cpp_source
    assert "surge_one_plus_erf(" in _compiled()["gelu_by_formula"].cpp_source   # x / sqrt 2: a division
    want = F.gelu(x.double())
    eager_error = (F.gelu(x).double() - want).abs()
    finite = want.isfinite()
    for name in ("gelu", "gelu_by_formula"):
        got = _compiled()[name](x)
        assert torch.equal(got.isnan(), F.gelu(x).isnan()), name
        error = (got.double() - want).abs()[finite]
        assert float(error.max()) <= max(float(eager_error[finite].max()), 4e-7), name
        near_zero = finite & (x > -1) & (x < 1)   # where GELU is small, relative error counts
        assert float(((got.double() - want).abs() / want.abs().clamp_min(1e-30))[near_zero & (x != 0)].max()) < 1e-6
        big = torch.tensor(1e30)
        assert got[x == -big].item() == 0.0 and got[x == big].item() == big.item()
