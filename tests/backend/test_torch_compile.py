"""The backend behind Dynamo: torch.compile(f, backend=triton_backend), forward and backward."""
import torch
import torch.nn.functional as F

from surge.backends import lookup_backend
from surge.backends.triton import triton_backend

from .helpers import DEVICE, randn


def test_torch_compile_inference_matches_eager():
    def f(x, w, b, r):
        return F.gelu(x @ w + b) + r
    cf = torch.compile(f, backend=triton_backend)
    for _ in range(2):   # fresh inputs each call
        args = randn(8, 16), randn(16, 16), randn(16), randn(8, 16)
        torch.testing.assert_close(cf(*args), f(*args))


def test_torch_compile_training_matches_eager_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8)).to(DEVICE)
    compiled = torch.compile(model, backend=triton_backend)
    x = randn(6, 16).requires_grad_()
    out = compiled(x)
    out.pow(2).sum().backward()
    got = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    expected_out = model(x)
    expected_out.pow(2).sum().backward()
    want = [x.grad] + [p.grad for p in model.parameters()]
    torch.testing.assert_close(out, expected_out, atol=1e-5, rtol=1e-5)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def test_registered_by_name():
    assert lookup_backend("triton") is triton_backend


def test_surge_compile_with_the_triton_backend():
    import surge

    @surge.compile(backend="triton", fullgraph=True)
    def block(x, w):
        return F.gelu(x @ w) + 1

    x, w = randn(4, 8), randn(8, 8)
    torch.testing.assert_close(block(x, w), F.gelu(x @ w) + 1)
    assert surge.counters["graphs"] == 1 and surge.counters["fallbacks"] == 0
