"""Torch state around and inside a captured program: ambient autocast, grad mode
set by the program itself, `.grad` that appears between calls, requires_grad_
on inputs, buffers reassigned in forward, and modules passed as arguments."""
import copy

import torch
import torch.nn as nn

import surge
from corpus_harness import RecordingBackend, assert_same, compare_call, randn


def linear_act(x, w):
    return torch.relu(x @ w) + 1


def test_ambient_autocast_around_the_call():
    compiled = surge.compile(linear_act, backend=RecordingBackend())
    compare_call(compiled, linear_act, (randn(3, 4), randn(4, 5)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = compare_call(compiled, linear_act, (randn(3, 4), randn(4, 5)))
    assert out.dtype == torch.bfloat16
    out = compare_call(compiled, linear_act, (randn(3, 4), randn(4, 5)))
    assert out.dtype == torch.float32
    assert surge.counters["fallbacks"] == 0


def test_program_that_turns_grad_off_leaves_it_off():
    def freeze_and_scale(x):
        torch.set_grad_enabled(False)
        return x * 2

    compiled = surge.compile(freeze_and_scale, backend=RecordingBackend())
    try:
        out = compiled(randn(3, requires_grad=True))
        assert not out.requires_grad
        assert not torch.is_grad_enabled(), "the program's global state change must persist, as in eager"
    finally:
        torch.set_grad_enabled(True)


def sgd_on_grad(w, lr):
    if w.grad is not None:
        return w - lr * w.grad
    return w * 1


def test_grad_attribute_appearing_between_calls():
    compiled = surge.compile(sgd_on_grad, backend=RecordingBackend())
    w = randn(3, requires_grad=True)
    torch.testing.assert_close(compiled(w, 0.1), w * 1)
    (w * torch.arange(3.0)).sum().backward()
    torch.testing.assert_close(compiled(w, 0.1), w - 0.1 * torch.arange(3.0))
    w.grad = torch.full((3,), 5.0)
    torch.testing.assert_close(compiled(w, 0.1), w - 0.5)


def test_requires_grad_set_on_input_by_the_program():
    def track(x):
        x.requires_grad_(True)
        return x * 2

    compiled = surge.compile(track, backend=RecordingBackend())
    for _ in range(2):
        x = randn(3)
        out = compiled(x)
        assert x.requires_grad and out.requires_grad
        torch.testing.assert_close(out, x.detach() * 2)


class RunningMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x):
        self.mean = self.mean * 0.9 + x.mean(0) * 0.1
        return x - self.mean


def test_buffer_reassigned_in_forward():
    module = RunningMean()
    twin = copy.deepcopy(module)
    compiled = surge.compile(module, backend=RecordingBackend())
    for _ in range(3):
        x = randn(5, 4)
        assert_same(compiled(x), twin(x.clone()))
        torch.testing.assert_close(module.mean, twin.mean)
    assert "mean" in dict(module.named_buffers())


def train_step(model, x):
    return model(x).pow(2).mean()


def test_module_passed_as_argument_alternating_instances():
    first, second = nn.Linear(4, 2), nn.Linear(4, 2)
    compiled = surge.compile(train_step, backend=RecordingBackend())
    for _ in range(2):
        for model in (first, second):
            compare_call(compiled, train_step, (model, randn(3, 4)))


def test_module_passed_as_argument_trains():
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    reference = copy.deepcopy(model)
    compiled = surge.compile(train_step, backend=RecordingBackend())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        x = randn(5, 4)
        loss = compiled(model, x)
        ref_loss = train_step(reference, x.clone())
        torch.testing.assert_close(loss, ref_loss)
        for o, l in ((opt, loss), (ref_opt, ref_loss)):
            o.zero_grad()
            l.backward()
            o.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


def test_parameters_iterated_from_module_argument():
    def l2_penalty(model, scale):
        return scale * sum(p.pow(2).sum() for p in model.parameters())

    compiled = surge.compile(l2_penalty, backend=RecordingBackend())
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    for scale in (0.1, 0.1):
        compare_call(compiled, l2_penalty, (model, scale))
    with torch.no_grad():
        model[0].weight.add_(1.0)
    compare_call(compiled, l2_penalty, (model, 0.1))
