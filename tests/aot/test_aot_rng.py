"""Random ops: correct distributions, and eager's exact numbers with fallback_random."""
import torch
import torch.nn.functional as F

from surge.options import Options

from .helpers import call_targets, compile_aot


def dropout_and_noise(x):
    return F.dropout(x, p=0.3, training=True), torch.rand_like(x), torch.randn_like(x[:64]) * 2 + 1, x.new_empty(16).normal_()


def test_dropout_distribution():
    x = torch.ones(20000)
    compiled = compile_aot(dropout_and_noise, [x])
    out, uniform, normal, _ = compiled(x)
    kept = out != 0
    assert abs(1 - kept.float().mean().item() - 0.3) < 0.02
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / 0.7))
    assert 0.48 < uniform.mean().item() < 0.52 and uniform.min() >= 0 and uniform.max() < 1
    out2, uniform2, _, _ = compiled(x)
    assert not torch.equal(out, out2) and not torch.equal(uniform, uniform2)  # fresh draws per call


def test_fallback_random_is_bit_identical_to_eager():
    x = torch.randn(256)
    compiled = compile_aot(dropout_and_noise, [x], options=Options(fallback_random=True,
                                                                   raise_internal_errors=True))
    torch.manual_seed(123)
    expected = dropout_and_noise(x)
    after_eager = torch.rand(3)
    torch.manual_seed(123)
    actual = compiled(x)
    after_compiled = torch.rand(3)
    for a, e in zip(actual, expected):
        assert torch.equal(a, e)
    assert torch.equal(after_eager, after_compiled)  # the RNG stream advanced as in eager


def test_dropout_backward_uses_forward_mask():
    def f(x, w):
        return F.dropout(x @ w, p=0.5, training=True).sum()

    x = torch.randn(8, 8)
    w = torch.randn(8, 8, requires_grad=True)
    record = {}
    compiled = compile_aot(f, [x, w], options=Options(fallback_random=True, raise_internal_errors=True),
                           record=record)
    forward, backward = record["graphs"]
    # the random op runs once, in the forward; the backward reuses its mask
    random_ops = [t for t in call_targets(backward) if torch.Tag.nondeterministic_seeded in t.tags]
    assert random_ops == []
    torch.manual_seed(7)
    (g,) = torch.autograd.grad(compiled(x, w), w)
    torch.manual_seed(7)
    w_ref = w.detach().clone().requires_grad_()
    (g_ref,) = torch.autograd.grad(f(x, w_ref), w_ref)
    assert torch.equal(g, g_ref)
