"""A graph break inside a ``for`` loop's body: every iteration runs the same resume functions.

A resume function that continued inside a loop holds the loop's iterator unread, and
the trace splits when it reaches that loop's FOR_ITER again: break code advances the
iterator in CPython and calls the resume function at the body's start with the next
item, or the one after the loop. So graph and recompile counts do not grow with the
number of iterations (HF models' LayerDrop: ``if self.training: p = torch.rand([]);
if p < self.layerdrop: continue`` in the layer loops), and the results are eager's.
"""
from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

import surge
from frontend_helpers import compile_strict, same


class Block(nn.Module):
    """A layer with its own Python forward (torch.compile compiles it as a frame of its own)."""

    def __init__(self, width=8):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, h):
        return self.lin(h)


class LayerDrop(nn.Module):
    """The loop of transformers' Whisper encoder and decoder (and other LayerDrop models)."""

    def __init__(self, n, layerdrop=0.0, layer=lambda: nn.Linear(8, 8)):
        super().__init__()
        self.layers = nn.ModuleList([layer() for _ in range(n)])
        self.layerdrop = layerdrop

    def forward(self, h):
        for layer in self.layers:
            if self.training:
                p = torch.rand([])
                if p < self.layerdrop:  # a branch on a tensor's value: a graph break
                    continue
            h = torch.relu(layer(h))
        return h.sum()


def _train_against_eager(model, compiled, calls=3, seed=None):
    """Forward and gradients of every parameter and the input equal eager's, fresh inputs each call."""
    params = list(model.parameters())
    for k in range(calls):
        x = torch.randn(2, 8, requires_grad=k % 2 == 1)
        wrt = params + ([x] if x.requires_grad else [])
        if seed is not None:
            torch.manual_seed(seed + k)
        expected = model(x)
        expected_grads = torch.autograd.grad(expected, wrt, allow_unused=True)
        if seed is not None:
            torch.manual_seed(seed + k)
        actual = compiled(x)
        grads = torch.autograd.grad(actual, wrt, allow_unused=True)
        torch.testing.assert_close(actual, expected)
        for g, e in zip(grads, expected_grads):
            assert (g is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(g, e)


def _surge_counts(n, layer=lambda: nn.Linear(8, 8), layerdrop=0.0, seed=None):
    surge.reset()
    surge.counters.reset()
    model = LayerDrop(n, layerdrop, layer)
    compiled = surge.compile(model, backend="aot_eager")
    _train_against_eager(model, compiled, seed=seed)
    c = surge.counters
    return c["graphs"], c["graph_breaks"], c["recompiles"], c["fallbacks"]


def _torch_compile_graphs(n, layer):
    import torch._dynamo

    torch._dynamo.reset()
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    model = LayerDrop(n, 0.0, layer)
    compiled = torch.compile(model, backend=count)
    for _ in range(3):
        compiled(torch.randn(2, 8)).backward()
    torch._dynamo.reset()
    return len(graphs)


@pytest.mark.parametrize("layer", [lambda: nn.Linear(8, 8), Block], ids=["linear", "user_block"])
def test_layerdrop_loop_counts_do_not_grow_with_the_layer_count(layer):
    # The first layer's input does not require grad, the later ones' do: the body's
    # resume function has one entry of each (torch.compile's layer frame does too).
    # Graphs: the first iteration's rand < layerdrop | the layer | the layer, on an input
    # that requires grad | rand < layerdrop of each later iteration | h.sum().
    four, sixteen = _surge_counts(4, layer), _surge_counts(16, layer)
    assert four == sixteen == (5, 2, 1, 0), (four, sixteen)
    # torch.compile skips the frame and compiles each layer's own forward frame (none at
    # all for nn.Linear, torch's own code): no more graphs for more layers either.
    peer = [_torch_compile_graphs(n, layer) for n in (4, 16)]
    assert peer[0] == peer[1], peer


def test_layerdrop_that_drops_layers_matches_eager():
    # rand() is drawn in the graphs in eager's order: the same layers are dropped.
    four = _surge_counts(4, layerdrop=0.5, seed=0)
    sixteen = _surge_counts(16, layerdrop=0.5, seed=0)
    assert four[1:] == sixteen[1:] and four[0] <= 5 and sixteen[0] <= 5, (four, sixteen)


def test_layerdrop_loop_in_eval_mode_is_one_graph():
    model = LayerDrop(16).eval()
    compiled, rec = compile_strict(model)
    for _ in range(3):
        x = torch.randn(2, 8)
        same(compiled(x), model(x))
    assert len(rec.graphs) == 1 and surge.counters["graph_breaks"] == 0
    assert surge.counters["recompiles"] == 0 and surge.counters.get("loop_splits", 0) == 0


def test_many_iterations_do_not_nest_frames():
    # Each iteration's resume functions are called after the break code returns, not
    # inside it (tail_calls.py): 300 layers run under a recursion limit a hundred frames
    # above the caller's depth, and make no more graphs than 4.
    model = LayerDrop(300)
    compiled = surge.compile(model, backend="eager")
    _train_against_eager(model, compiled, calls=2)  # captures, under the usual limit
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(_stack()) + 100)
    try:
        for _ in range(2):
            compiled(torch.randn(2, 8)).backward()
    finally:
        sys.setrecursionlimit(limit)
    assert surge.counters["graphs"] <= 5 and surge.counters["fallbacks"] == 0


def _stack():
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


# ---- loops of every kind -----------------------------------------------------------

WS = [torch.randn(4, 4) for _ in range(16)]


def over_list(x, ws):
    for w in ws:
        x = torch.tanh(x @ w)
        if x.sum() > 0:
            x = -x
    return x


def over_tuple(x, ws):
    for w in tuple(ws):
        x = torch.tanh(x @ w)
        if x.sum() > 0:
            x = -x
    return x


def over_range(x, ws):
    for i in range(len(ws)):
        x = torch.tanh(x @ ws[0]) + i
        if x.sum() > 0:
            x = x - 1
    return x


def over_enumerate(x, ws):
    for i, w in enumerate(ws):
        x = torch.tanh(x @ w) * (i + 1)
        if x.sum() > 0:
            continue
        x = x * 0.5
    return x


def over_zip(x, ws):
    for w, v in zip(ws, reversed(ws)):
        x = torch.tanh(x @ w @ v)
        if x.sum() > 0:
            x = x + 1
    return x


def over_dict_items(x, ws):
    for name, w in {f"w{i}": w for i, w in enumerate(ws)}.items():
        x = torch.tanh(x @ w)
        if x.sum() > 0:
            x = x + 1
    return x


def over_nested_unpack(x, ws):
    for i, (a, b) in enumerate(zip(ws, ws[1:])):
        x = torch.tanh(x @ a @ b) + i
        if x.sum() > 0:
            x = -x
    return x


def with_break(x, ws):
    for w in ws:
        x = torch.tanh(x @ w) * 3
        if x.sum() > 4:
            break
        x = x + 0.1
    return x


def with_else(x, ws):
    for w in ws:
        x = torch.tanh(x @ w) * 3
        if x.sum() > 6:
            break
    else:
        x = x * 100
    return x


def with_return(x, ws):
    for w in ws:
        x = torch.tanh(x @ w) * 3
        if x.sum() > 4:
            return x * 7
    return x - 1


def nested_loops(x, ws):
    for a in ws[:3]:
        for b in ws[3:]:
            x = torch.tanh(x @ a @ b)
            if x.sum() > 0:
                x = x + 1
        x = x * 0.5
    return x


def no_grad_around(x, ws):
    with torch.no_grad():
        for w in ws:
            x = torch.tanh(x @ w)
            if x.sum() > 0:
                x = x + 1
    return x, x.requires_grad


def no_grad_inside(x, ws):
    for w in ws:
        with torch.no_grad():
            x = torch.tanh(x @ w)
            if x.sum() > 0:
                x = x + 1
        x = x * 2
    return x, x.requires_grad


def print_in_body(x, ws):
    for w in ws:
        x = torch.tanh(x @ w)
        print(end="")
        x = x + 1
    return x


class Walk:
    """A user iterator: CPython calls its __next__ at each split, as eager does."""

    def __init__(self, ws):
        self.ws, self.i = ws, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= len(self.ws):
            raise StopIteration
        self.i += 1
        return self.ws[self.i - 1]


def over_user_iterator(x, ws):
    for w in Walk(ws):
        x = torch.tanh(x @ w)
        if x.sum() > 0:
            x = x + 1
    return x


def iterator_also_a_local(x, ws):
    it = iter(ws)
    for w in it:
        x = torch.tanh(x @ w)
        if x.sum() > 0:
            x = x @ next(it, w)  # advances the loop's own iterator
    return x


LOOPS = [over_list, over_tuple, over_range, over_enumerate, over_zip, over_dict_items, over_nested_unpack,
         with_break, with_else, with_return, nested_loops, no_grad_around, no_grad_inside, print_in_body,
         over_user_iterator, iterator_also_a_local]
# Loops whose count still depends on the iterations: a key read as a string (guarded by
# value) and an iterator the body advances itself (read: the trace unrolls it, as before,
# until the cache limit; still eager's results).
GROWING = {over_dict_items, iterator_also_a_local}


# Loops left by a `break` or `return` on the data: which exits are taken (so which
# resume functions are made) depends on the inputs, not on the length.
LEAVE_EARLY = {with_break, with_else, with_return}


def _run_loop(fn, n, calls=4):
    surge.reset()
    surge.counters.reset()
    compiled = surge.compile(fn, backend="eager")
    for k in range(calls):
        x = torch.randn(2, 4, requires_grad=fn is not no_grad_around)
        same(compiled(x, WS[:n]), fn(x, WS[:n]))
    c = surge.counters
    return c["graphs"], c["recompiles"], c["fallbacks"]


@pytest.mark.parametrize("fn", LOOPS, ids=[f.__name__ for f in LOOPS])
def test_loop_with_a_break_matches_eager_and_its_counts_do_not_grow(fn):
    short, long = _run_loop(fn, 6), _run_loop(fn, 16)
    if fn not in GROWING:
        assert short[2] == long[2] == 0, (short, long)
        if fn not in LEAVE_EARLY:
            assert short == long, (short, long)
        assert long[0] <= 6 and long[1] <= 2, long  # an int loop variable: one recompile, then symbolic


def test_loop_over_a_generator_still_runs_eagerly():
    def gen(ws):
        yield from ws

    def over_generator(x, ws):
        for w in gen(ws):
            x = torch.tanh(x @ w)
            if x.sum() > 0:
                x = x + 1
        return x

    compiled = surge.compile(over_generator, backend="eager")
    for _ in range(2):
        x = torch.randn(2, 4)
        same(compiled(x, WS[:4]), over_generator(x, WS[:4]))
    assert surge.counters["fallbacks"] == 1


def test_explain_reports_loop_splits_apart_from_breaks():
    report = surge.explain(over_list)(torch.randn(2, 4), WS[:6])
    assert report.graph_break_count >= 1
    assert all("tensor's value" in r.reason for r in report.break_reasons), report.break_reasons
    assert report.loop_splits and all("over_list" in s.location for s in report.loop_splits)
    assert "Loop splits" in str(report)
