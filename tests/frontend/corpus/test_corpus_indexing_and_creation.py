"""Tensor indexing with tensors, scatter/index updates, in-place writes into views,
factory functions with dtype/device taken from inputs, and type promotion."""
import math

import pytest
import torch
import torch.nn as nn

import surge
from corpus_harness import RecordingBackend, check_fn, randn


def mat(i):
    return (randn(4, 6),)


def advanced_indexing(x):
    rows = torch.arange(4)
    cols = x.argmax(dim=1)
    picked = x[rows, cols]
    return picked, x[..., None, 1:5:2], x[:, None].shape, x[[0, 2]][:, [1]]


def scatter_and_index_updates(x):
    idx = torch.tensor([0, 2, 2, 1])
    summed = torch.zeros(3, 6).index_add(0, idx, x)
    scattered = torch.zeros(4, 6).scatter_add(1, torch.zeros(4, 6, dtype=torch.long), x)
    put = x.clone().index_put_((torch.tensor([0, 0]), torch.tensor([1, 1])), torch.tensor(5.0), accumulate=True)
    return summed, scattered, put


def setitem_with_tensor_index(x):
    y = x.clone()
    y[x.argmin(dim=0), torch.arange(6)] = 0.0
    y[torch.tensor([1, 3])] += 1.0
    return y


def in_place_on_views_of_intermediates(x):
    h = x * 2
    h[:, 0].zero_()
    h.diagonal().fill_(7.0)
    h.t()[1].mul_(-1)
    return h


def factories_from_input_metadata(x):
    n = x.shape[0]
    return (
        torch.full_like(x, 2, dtype=torch.long),
        torch.empty_like(x).fill_(1.5),
        torch.linspace(0, 1, steps=n, dtype=x.dtype),
        torch.tril_indices(n, n),
        x.new_zeros(n, dtype=torch.long),
        torch.ones(int(math.sqrt(n)), round(n * 0.75), device=x.device),
    )


def type_promotion(x):
    ints = (x * 10).to(torch.int32)
    small = ints.to(torch.int8)
    return ints + 0.5, ints // 3, (x > 0).sum(), small * 3, ints.to(torch.uint8) + 250, x.half() + ints


def repeat_and_expand(x):
    return x.repeat_interleave(2, dim=0), x[:1].expand_as(x), x.unsqueeze(0).expand(2, -1, -1).sum(0)


@pytest.mark.parametrize(
    "program",
    [advanced_indexing, scatter_and_index_updates, setitem_with_tensor_index,
     in_place_on_views_of_intermediates, factories_from_input_metadata, type_promotion, repeat_and_expand],
    ids=lambda fn: fn.__name__,
)
def test_indexing_or_creation_program(program):
    check_fn(program, mat)


class ClippedLinear(nn.Module):
    """Clips its weights in place during forward, as weight-constrained layers do."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        with torch.no_grad():
            self.fc.weight.clamp_(-0.1, 0.1)
        return self.fc(x)


def test_parameter_clipped_in_place_inside_forward():
    module = ClippedLinear()
    compiled = surge.compile(module, backend=RecordingBackend())
    for _ in range(2):
        with torch.no_grad():
            module.fc.weight.normal_().mul_(10)
        x = randn(4, 6)
        out = compiled(x)
        assert module.fc.weight.abs().max() <= 0.1, "the in-place clip must reach the original weights"
        torch.testing.assert_close(out, torch.nn.functional.linear(x, module.fc.weight, module.fc.bias))
    assert surge.counters["fallbacks"] == 0
