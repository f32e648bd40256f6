"""The generated code's own float exp (``surge_expf`` in the prelude) against float64 exp,
over every magnitude a float can take: within 1 ulp, inf/NaN/-0.0 and subnormal results as eager."""
import torch

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


CASES = {
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
