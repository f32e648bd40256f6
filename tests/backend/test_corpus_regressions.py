"""Regressions found by running the capture corpus through the generated-code backends:
each is a wrong result (or crash) of lowering, scheduling or the host wrapper."""
import torch
import torch.nn as nn

import surge
from surge.backends.executable import Executable
from surge.schedule.groups import KernelGroup

from .helpers import aten_graph, assert_matches_eager, compile_fn, randn, schedule_of


def test_copy_back_runs_after_every_read_of_the_old_value():
    # ``add`` is folded into the kernel of ``mul`` (lazily, at the output), which
    # reads the input's old value: the copy into the input must come after it.
    def counts_steps(x, state):
        new = state + 1
        state.copy_(new)
        return x * new

    x, state = randn(4), torch.zeros((), device=randn(1).device)
    gm = aten_graph(counts_steps, x, state.clone())
    compiled = compile_fn(counts_steps, x, state.clone())
    assert isinstance(compiled, Executable)
    for step in range(1, 3):
        x = randn(4)
        out = compiled(x, state)
        torch.testing.assert_close(out, x * step)
        assert state.item() == step
    assert any(n.target is torch.ops.aten.copy_.default for n in gm.graph.nodes)


def test_extern_view_keeps_its_base_buffer_alive():
    # unfold stays an extern call returning a view of the matmul's result; the
    # memory plan must not hand that storage to the next kernel (same layout)
    # while the view is still to be read.
    def view_read_late(x, w, z):
        g = x @ w
        v = g.unfold(1, 4, 4)
        return z * 3, v * 2

    inputs = (randn(4, 4), randn(4, 8), randn(4, 8))
    assert_matches_eager(view_read_late, compile_fn(view_read_late, *inputs), *inputs)
    schedule = schedule_of(view_read_late, *inputs)
    extern_ops = [s.buffer.op for s in schedule.steps if not isinstance(s, KernelGroup)]
    assert torch.ops.aten.unfold.default in extern_ops
    assert schedule.memory.reuses == 0, str(schedule.memory)


def test_as_strided_offset_counts_in_the_traced_storage():
    # ``y`` is a select of a computed value: traced with a storage offset, but
    # realized into a buffer of its own; the as_strided offset must be rebased.
    def window_of_computed_row(x):
        y = (x + 1)[1]
        return torch.as_strided(y, (2, 3), (6, 1), y.storage_offset() + 2) * 2

    x = randn(3, 2, 6)
    assert_matches_eager(window_of_computed_row, compile_fn(window_of_computed_row, x), x)


def test_input_that_starts_inside_its_storage():
    # Extern calls see inputs through as_strided, whose offset counts from the
    # storage's start; kernels count from the input's first element.
    def matmul_of_transposed(x, w):
        return (x.t() @ w) + 1

    base, w = randn(3, 4, 4), randn(4, 2)
    compiled = compile_fn(matmul_of_transposed, base[1], w)
    for k in range(3):
        assert_matches_eager(matmul_of_transposed, compiled, base[k], w)


def test_recurrent_layers_through_surge_compile():
    torch.manual_seed(0)
    for layer in (nn.LSTM, nn.GRU):
        rnn = layer(6, 4, batch_first=True)
        compiled = surge.compile(rnn, backend="triton")
        x = torch.randn(2, 3, 6)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x)[0], rnn(x)[0], rtol=1e-4, atol=1e-5)


def test_graph_on_meta_tensors_runs_eagerly():
    # no kernel can run on meta tensors: the backend hands back the ATen graph
    def affine(x):
        return x * 3 + 1

    compiled = surge.compile(affine, backend="triton")
    out = compiled(torch.empty(3, device="meta"))
    assert out.device.type == "meta" and out.shape == (3,)
    torch.testing.assert_close(compiled(torch.ones(3)), torch.full((3,), 4.0))


def test_bfloat16_results_round_to_nearest_even():
    # Triton's interpreter truncates fp32 -> bf16; results must round as eager does
    def relu_plus_one(x):
        return torch.relu(x) + 1

    x = (randn(256) * 4).to(torch.bfloat16)
    compiled = compile_fn(relu_plus_one, x)
    assert_matches_eager(relu_plus_one, compiled, x, rtol=0, atol=0)


def test_integer_fmod_takes_the_sign_of_the_dividend():
    def int_fmod(a, b):
        return torch.fmod(a, b), torch.roll(a, shifts=1, dims=1)

    a = torch.tensor([[-7, 7, -6, 5], [0, -1, 9, -9]], device=randn(1).device)
    b = torch.tensor([[3, -3, 4, -2], [5, 2, -4, 4]], device=a.device)
    compiled = compile_fn(int_fmod, a, b)
    assert isinstance(compiled, Executable)
    assert_matches_eager(int_fmod, compiled, a, b)
