"""Scatters write only the elements they update, into the tensor they update.

``x[idx] = v``, ``index_copy_``, slice and select assignment and ``scatter_`` of a tensor in
memory become a loop over the new elements (a ``ScatterBuffer``) storing into a copy of
the tensor; the copy goes where the tensor itself may be overwritten (a mutated input
whose old value nothing reads afterwards, a value nothing else reads), and with it the
copy back into the input. Every case runs against eager on fresh random inputs over
several calls (results and mutated inputs), and its schedule says which copies remain.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import surge
import surge.aot
from surge.backends.cpp import compile_aten_graph_cpp
from surge.backends.cudagraph_policy import mutated_inputs
from surge.backends.triton import compile_aten_graph
from surge.lowering.ir import ScatterBuffer
from surge.lowering.lower import lower_graph
from surge.options import Options
from surge.runtime.target_compile import compile_in_subprocess
from surge.schedule import schedule_graph

from .helpers import DEVICE


def aten_of(fn, inputs):
    """``fn``'s ATen graph, as surge's frontend captures it (``x[idx] = v`` included), and its inputs."""
    captured = []

    def keep(gm, example_inputs):
        captured.append((gm, list(example_inputs)))
        return gm
    surge.compile(fn, backend=keep, fullgraph=True)(*[t.clone() for t in inputs])
    (gm, example), = captured
    return surge.aot.trace_aten(gm, example), example


def schedule_of(fn, inputs):
    graph, _ = lower_graph(*aten_of(fn, inputs))
    return schedule_graph(graph)


def copy_backs(schedule) -> int:
    return sum(1 for s in schedule.externs if s.buffer.op is torch.ops.aten.copy_.default)


def kept_copies(schedule) -> int:
    """Scatters that still write into a copy of the tensor they update (a whole-tensor copy kernel)."""
    by_name = schedule.graph.by_name
    return sum(1 for s, storage in schedule.scatter_storage.items() if storage == by_name[s].into)


def scatters(schedule) -> int:
    return sum(isinstance(n, ScatterBuffer) for k in schedule.kernels for n in k.nodes)


def decode_step(k_cache, v_cache, pos, q, k, v):
    """One token of attention over a static KV cache, written in place."""
    k_cache.index_copy_(2, pos, k)
    v_cache.index_copy_(2, pos, v)
    return F.softmax(q @ k_cache.transpose(-1, -2), dim=-1) @ v_cache


def set_rows(x, idx, v):
    x[idx] = v


def set_rows_to_gelu(x, idx, v):
    x[idx] = F.gelu(v)   # the loop IR's fused form of erf inside the stored value


def set_slice(x, v):
    x[:, 2:4] = v


def set_column(x, v):
    x[:, 3] = v * 2


def set_strided_slice(x, v):
    x[:, 1::3] = v


def scatter_rows(x, index, src):
    x.scatter_(1, index, src)


def old_value_read_after_the_write(x, idx, v):
    before = x * 2
    x[idx] = v
    return x + before


def returns_the_updated_input(x, idx, v):
    x[idx] = v
    return x


def writes_twice(x, i, a, j, b):
    x[i] = a
    x[j] = b


def updates_a_copy_and_the_input(x, i, a, j, b):
    updated = x.index_put((i,), a)
    x.index_put_((j,), b)
    return updated


def updates_a_view(x, idx, v):
    x[1].index_copy_(0, idx, v)


def updates_a_matmul_result(x, w, idx, v):
    y = x @ w
    y[idx] = v
    return y.sin()


def reads_the_old_value_while_writing(x, idx, v):
    x[idx] = x[idx.flip(0)] * v


def sets_repeated_indices_alike(x, idx, v):
    x[idx] = v.sum()


def sets_by_a_mask(x, v):
    x[x > 0] = v


def adds_at_repeated_indices(x, idx, v):
    x.index_put_((idx,), v, accumulate=True)


def _rows(n, k):
    return torch.randperm(n)[:k]


CASES = {
    # name: (function, make inputs, copy backs left, whole copies left, scatter kernels)
    "decode_step": (decode_step, lambda: (torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4), torch.randint(0, 8, (1,)),
                                          torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4)),
                    0, 0, 2),
    "set_rows": (set_rows, lambda: (torch.randn(6, 5), _rows(6, 3), torch.randn(3, 5)), 0, 0, 1),
    "set_rows_negative": (set_rows, lambda: (torch.randn(6, 5), _rows(6, 3) - 6, torch.randn(3, 5)), 0, 0, 1),
    "set_rows_to_gelu": (set_rows_to_gelu, lambda: (torch.randn(6, 5), _rows(6, 3), torch.randn(3, 5)), 0, 0, 1),
    "set_slice": (set_slice, lambda: (torch.randn(3, 6), torch.randn(3, 2)), 0, 0, 1),
    "set_column": (set_column, lambda: (torch.randn(3, 6), torch.randn(3)), 0, 0, 1),
    "set_strided_slice": (set_strided_slice, lambda: (torch.randn(3, 7), torch.randn(3, 2)), 0, 0, 1),
    "set_rows_of_a_transposed_input": (set_rows, lambda: (torch.randn(5, 6).t(), _rows(6, 2), torch.randn(2, 5)),
                                       0, 0, 1),
    "scatter_rows": (scatter_rows, lambda: (torch.randn(3, 6), torch.stack([torch.randperm(6)[:4] for _ in range(3)]),
                                            torch.randn(3, 4)), 0, 0, 1),
    # the old value is read after the scatter: the copy stays, and the copy back with it
    "old_value_read_after_the_write": (old_value_read_after_the_write,
                                       lambda: (torch.randn(6, 5), _rows(6, 2), torch.randn(2, 5)), 1, 1, 1),
    "returns_the_updated_input": (returns_the_updated_input,
                                  lambda: (torch.randn(6, 5), _rows(6, 2), torch.randn(2, 5)), 0, 0, 1),
    # the second write overwrites some rows of the first: both in the input, in order
    "writes_twice": (writes_twice, lambda: (torch.randn(6, 5), torch.tensor([0, 2]), torch.randn(2, 5),
                                            torch.tensor([2, 4]), torch.randn(2, 5)), 0, 0, 2),
    # two updates of one tensor from its old value: one of them needs a copy
    "updates_a_copy_and_the_input": (updates_a_copy_and_the_input,
                                     lambda: (torch.randn(6, 5), _rows(6, 2), torch.randn(2, 5), _rows(6, 2),
                                              torch.randn(2, 5)), 0, 1, 2),
    "updates_a_matmul_result": (updates_a_matmul_result,
                                lambda: (torch.randn(6, 4), torch.randn(4, 5), _rows(6, 2), torch.randn(2, 5)),
                                0, 0, 1),
    # functionalization writes the updated view back whole: the view is copied, updated and
    # written into the input (no copy of the whole input)
    "updates_a_view": (updates_a_view, lambda: (torch.randn(3, 6, 4), _rows(6, 2), torch.randn(2, 4)), 0, 1, 2),
    # the new rows are read from the old ones at other places: the copy stays
    "reads_the_old_value_while_writing": (reads_the_old_value_while_writing,
                                          lambda: (torch.randn(6, 5), _rows(6, 3), torch.randn(3, 5)), 1, 1, 1),
    "sets_repeated_indices_alike": (sets_repeated_indices_alike,
                                    lambda: (torch.randn(6, 5), torch.tensor([1, 4, 1, 1]), torch.randn(3)), 0, 0, 1),
    "sets_no_rows": (set_rows, lambda: (torch.randn(6, 5), torch.zeros(0, dtype=torch.long), torch.randn(0, 5)),
                     0, 0, 1),
    # a bool mask selects by data: an ATen call
    "sets_by_a_mask": (sets_by_a_mask, lambda: (torch.randn(6, 5), torch.tensor(0.5)), 1, 0, 0),
    # repeated indices that add up stay an ATen call (which adds them all)
    "adds_at_repeated_indices": (adds_at_repeated_indices,
                                 lambda: (torch.randn(6, 5), torch.tensor([1, 3, 1, 1]), torch.randn(4, 5)), 1, 0, 0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_schedule_keeps_only_the_copies_it_needs(case):
    fn, make_inputs, backs, copies, kernels = CASES[case]
    schedule = schedule_of(fn, make_inputs())
    assert scatters(schedule) == kernels
    assert (copy_backs(schedule), kept_copies(schedule)) == (backs, copies)


def device_of(backend: str) -> str:
    """Where a backend's test tensors live: Triton kernels run on the GPU when there is one."""
    return DEVICE if backend == "triton" else "cpu"


def assert_runs_like_eager(fn, make_inputs, backend, calls=3):
    compiled = surge.compile(fn, backend=backend)
    for _ in range(calls):
        inputs = [t.to(device_of(backend)) for t in make_inputs()]
        mine = [t.clone() for t in inputs]   # in the same layouts (a transposed input stays one)
        expected = fn(*inputs)
        actual = compiled(*mine)
        for a, e in zip(mine, inputs):
            torch.testing.assert_close(a, e)
        if expected is not None:
            torch.testing.assert_close(actual, expected)
    assert surge.counters["fallbacks"] == 0


@pytest.mark.parametrize("case", list(CASES))
def test_results_and_updated_inputs_match_eager_cpp(case):
    fn, make_inputs, *_ = CASES[case]
    assert_runs_like_eager(fn, make_inputs, "cpp")


@pytest.mark.parametrize("case", ["decode_step", "set_rows_negative", "set_column", "old_value_read_after_the_write",
                                  "writes_twice", "updates_a_copy_and_the_input", "scatter_rows", "sets_no_rows",
                                  "set_rows_to_gelu"])
def test_results_and_updated_inputs_match_eager_triton(case):
    fn, make_inputs, *_ = CASES[case]
    assert_runs_like_eager(fn, make_inputs, "triton", calls=2)


def test_symbolic_sizes():
    """One graph for every length of the updated tensor, right at each."""
    compiled = surge.compile(set_rows, backend="cpp", dynamic=True)
    for n in (6, 9, 13):
        x, idx, v = torch.randn(n, 5), _rows(n, 3), torch.randn(3, 5)
        mine = x.clone()
        compiled(mine, idx, v)
        set_rows(x, idx, v)
        torch.testing.assert_close(mine, x)
    assert surge.counters["graphs"] == 1 and surge.counters["fallbacks"] == 0


def test_scatter_kernels_compile_for_sm90():
    fn, make_inputs, *_ = CASES["decode_step"]
    inputs = [(t.bfloat16() if t.is_floating_point() else t).to(DEVICE) for t in make_inputs()]
    exe = compile_aten_graph(*aten_of(fn, inputs), Options.from_env())
    results = compile_in_subprocess([exe.path])
    assert results and all(v == "ok" for v in results.values()), results


def test_the_returned_input_is_the_input():
    fn, make_inputs, *_ = CASES["returns_the_updated_input"]
    x, idx, v = make_inputs()
    assert surge.compile(fn, backend="cpp")(x, idx, v) is x


def test_a_scatter_writes_only_its_elements_into_the_input():
    """One kernel over the new rows: no copy kernel, no ATen call, the input's storage."""
    x, idx, v = torch.randn(64, 16), _rows(64, 2), torch.randn(2, 16)
    schedule = schedule_of(set_rows, (x, idx, v))
    assert len(schedule.steps) == 1
    kernel = schedule.kernels[0]
    assert tuple(kernel.x_ranges) == (2, 16)
    (scatter,) = kernel.nodes
    updated = next(b.name for b in schedule.graph.inputs if tuple(b.shape) == (64, 16))
    assert schedule.input_written(scatter.name) == updated


def test_the_launch_table_names_the_input_a_scatter_writes():
    """What the CUDA graph policy reads to see that a call updates an input."""
    gm, example = aten_of(set_rows, (torch.randn(6, 5), _rows(6, 2), torch.randn(2, 5)))
    exe = compile_aten_graph_cpp(gm, example, Options.from_env())
    assert [e["kind"] for e in exe.launches] == ["kernel"]
    updated = next(k for k, e in enumerate(exe.inputs) if e["shape"] == [6, 5])
    assert mutated_inputs(exe) == {updated}
    assert list(exe.launches[0]["into"].values()) == [exe.inputs[updated]["name"]]


class CachedAttention(nn.Module):
    """The decode workload's block in small: a KV cache in buffers, written with index_copy_."""

    def __init__(self, width=16, heads=2, max_len=8):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_len, width // heads))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_len, width // heads))

    def forward(self, x, pos):
        width = x.shape[-1]
        q, k, v = (t.view(1, 1, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(width, dim=-1))
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        visible = (torch.arange(self.k_cache.shape[2], device=pos.device) <= pos).view(1, 1, 1, -1)
        return F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=visible)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_decoding_with_a_cache_in_buffers_matches_eager(backend):
    torch.manual_seed(0)
    device = device_of(backend)
    eager = CachedAttention().to(device)
    model = CachedAttention().to(device)
    model.load_state_dict(eager.state_dict())
    compiled = surge.compile(model, backend=backend)
    with torch.no_grad():
        for step in range(4):
            x, pos = torch.randn(1, 1, 16, device=device), torch.tensor([step], device=device)
            torch.testing.assert_close(compiled(x, pos), eager(x, pos))
            torch.testing.assert_close(model.k_cache, eager.k_cache)
            torch.testing.assert_close(model.v_cache, eager.v_cache)
    assert surge.counters["fallbacks"] == 0 and surge.counters["graphs"] == 1


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_training_step_reads_the_written_cache(backend):
    """Forward and backward of a loss that reads a cache updated in place: the gradient,
    the loss and the cache are eager's (the backward reads the cache's new value)."""
    def step(cache, x, w, pos):
        y = torch.tanh(x @ w)
        cache.index_copy_(0, pos, y.detach())
        return ((cache @ y.t()) ** 2).sum()

    compiled = surge.compile(step, backend=backend)
    device = device_of(backend)
    for _ in range(3):
        x, pos = torch.randn(2, 4, device=device), _rows(6, 2).to(device)
        w = torch.randn(4, 5, requires_grad=True, device=device)
        w_mine = w.detach().clone().requires_grad_()
        cache = torch.randn(6, 5, device=device)
        cache_mine = cache.clone()
        loss = step(cache, x, w, pos)
        loss.backward()
        loss_mine = compiled(cache_mine, x, w_mine, pos)
        loss_mine.backward()
        torch.testing.assert_close(loss_mine, loss)
        torch.testing.assert_close(w_mine.grad, w.grad)
        torch.testing.assert_close(cache_mine, cache)
    assert surge.counters["fallbacks"] == 0
