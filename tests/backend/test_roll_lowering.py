"""torch.roll lowered as an index remap ((i - shift) mod n along each rolled dim): it fuses
with the kernels around it instead of being one ATen copy per rolled dim (a shifted-window
attention rolls its activations before and after every other block), on both code
generators, forward and backward."""
import pytest
import torch

import surge
from surge.aot.compile import aot_compile
from surge.lowering.ir import ExternBuffer
from surge.lowering.lower import lower_graph
from surge.schedule import schedule_graph
from surge.target import cpp_target

CASES = {
    "two_dims": (lambda x: torch.roll(x * 2, shifts=(-3, 3), dims=(1, 2)) + 1, lambda: (torch.randn(2, 7, 9, 4),)),
    "negative_dim_and_a_shift_past_the_size": (lambda x: torch.roll(x, 17, -2) * x, lambda: (torch.randn(3, 5, 6),)),
    "one_dim_twice": (lambda x: torch.roll(x, shifts=(2, 3), dims=(0, 0)) - x, lambda: (torch.randn(7, 3),)),
    "whole_turn": (lambda x: torch.roll(x, 6, 1) * 3, lambda: (torch.randn(2, 6),)),
    "bf16": (lambda x: torch.roll(x, (1, -1), (0, 1)), lambda: (torch.randn(4, 5).bfloat16(),)),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_roll_matches_eager_on_both_generators(name, backend):
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    torch.testing.assert_close(surge.compile(fn, backend=backend)(*inputs), fn(*inputs), rtol=0, atol=0)
    assert surge.counters["fallbacks"] == 0


def test_roll_is_no_extern_and_fuses():
    fn, make_inputs = CASES["two_dims"]
    inputs = list(make_inputs())
    graphs = []

    def grab(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm

    aot_compile(torch.fx.symbolic_trace(fn), inputs, fw_compiler=grab, bw_compiler=grab)(*inputs)
    (gm, example_inputs), = graphs
    graph, _ = lower_graph(gm, list(example_inputs), target=cpp_target())
    steps = schedule_graph(graph).steps
    assert len(steps) == 1 and not isinstance(getattr(steps[0], "buffer", None), ExternBuffer), steps


def test_rolled_activations_train_as_eager():
    def block(x, w):
        shifted = torch.roll(x, shifts=(-2, -2), dims=(1, 2))
        return torch.roll(torch.tanh(shifted @ w), shifts=(2, 2), dims=(1, 2))

    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(2, 6, 6, 4, requires_grad=True)
    compiled = surge.compile(block)
    out = compiled(x, w)
    out.square().sum().backward()
    grads = (x.grad, w.grad)
    x.grad = w.grad = None
    block(x, w).square().sum().backward()
    torch.testing.assert_close(out, block(x, w))
    torch.testing.assert_close(grads, (x.grad, w.grad))
