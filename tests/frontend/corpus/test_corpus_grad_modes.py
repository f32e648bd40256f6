"""torch.no_grad()/enable_grad() blocks and decorators, set_grad_enabled, detach,
requires_grad of outputs, and gradients flowing through captured graphs."""
import pytest
import torch

import surge
from corpus_harness import RecordingBackend, check_fn, randn


def leaf_inputs(i):
    return randn(3, 4, requires_grad=True), randn(4, 2, requires_grad=True)


def no_grad_block(x, w):
    with torch.no_grad():
        frozen = x @ w
    live = x @ w
    return frozen, live, frozen.requires_grad, live.requires_grad


def enable_grad_inside_no_grad(x, w):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
    return a, b


@torch.no_grad()
def decorated_no_grad_callee(t):
    return t * 10


def calls_no_grad_decorated_callee(x, w):
    return decorated_no_grad_callee(x) + (x @ w).sum()


def set_grad_enabled_false(x, w):
    with torch.set_grad_enabled(False):
        y = x @ w
    return y, torch.is_grad_enabled()


def detach_and_requires_grad_checks(x, w):
    h = x @ w
    out = h.detach() * 2 if h.requires_grad else h
    return out, h


def is_grad_enabled_branch(x, w):
    if torch.is_grad_enabled():
        return x @ w
    return (x @ w).relu()


def inference_style_ema(x, w):
    # The usual "update a running average without tracking gradients" pattern.
    ema = torch.zeros_like(w)
    with torch.no_grad():
        ema.mul_(0.9).add_(w, alpha=0.1)
    return x @ ema, x @ w


CASES = [
    (no_grad_block, leaf_inputs),
    (enable_grad_inside_no_grad, leaf_inputs),
    (calls_no_grad_decorated_callee, leaf_inputs),
    (set_grad_enabled_false, leaf_inputs),
    (detach_and_requires_grad_checks, leaf_inputs),
    (is_grad_enabled_branch, leaf_inputs),
    (inference_style_ema, leaf_inputs),
]


@pytest.mark.parametrize("program,make_args", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_grad_mode_program(program, make_args):
    check_fn(program, make_args)


@torch.no_grad()
def decorated_no_grad_entry(x, w):
    return x @ w, torch.is_grad_enabled()


def test_no_grad_decorated_function_compiled():
    check_fn(decorated_no_grad_entry, leaf_inputs)


def test_grad_mode_restored_after_compiled_no_grad_block():
    compiled = surge.compile(no_grad_block, backend=RecordingBackend())
    x, w = leaf_inputs(0)
    compiled(x, w)
    assert torch.is_grad_enabled(), "a no_grad block inside the program must not leak out"


def test_gradients_match_eager_through_no_grad_mix():
    def loss_fn(x, w):
        with torch.no_grad():
            scale = (x @ w).abs().mean()
        return ((x @ w) / (scale + 1)).pow(2).sum()

    compiled = surge.compile(loss_fn, backend=RecordingBackend())
    for i in range(2):
        x, w = leaf_inputs(i)
        xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        loss = compiled(x, w)
        expected = loss_fn(xe, we)
        torch.testing.assert_close(loss, expected)
        loss.backward()
        expected.backward()
        torch.testing.assert_close(x.grad, xe.grad)
        torch.testing.assert_close(w.grad, we.grad)


def test_program_under_caller_no_grad_returns_no_grad_outputs():
    compiled = surge.compile(detach_and_requires_grad_checks, backend=RecordingBackend())
    x, w = leaf_inputs(0)
    with torch.no_grad():
        out, h = compiled(x, w)
    assert not out.requires_grad and not h.requires_grad
    torch.testing.assert_close(out, (x @ w).detach())


@torch.enable_grad()
def decorated_enable_grad_callee(t, w):
    return t @ w


def test_enable_grad_decorated_callee_called_under_no_grad():
    def inference(x, w):
        with torch.no_grad():
            frozen = x @ w
            live = decorated_enable_grad_callee(x, w)
        return frozen, live

    check_fn(inference, leaf_inputs)
