"""Graph and recompile counts no higher than torch.compile's: resume functions shared
by the paths that reach them, modules of one class sharing cache entries, and no
backend call for a frame without tensor work."""
from __future__ import annotations

import copy
import itertools
import traceback

import pytest
import torch
from torch import nn

import surge
from frontend_helpers import Recorder, compile_strict, same


def three_ifs(x):
    if x[0] > 0:
        x = x + 1
    else:
        x = x - 1
    if x[1] > 0:
        x = x * 2
    else:
        x = x * 3
    if x[2] > 0:
        x = x.sin()
    else:
        x = x.cos()
    return x


def signed_inputs():
    """One input per path through three_ifs (each sign survives the +-1 and the scaling)."""
    return [torch.tensor(signs) * (2 + torch.rand(3)) for signs in itertools.product([-1.0, 1.0], repeat=3)]


def test_sequential_tensor_ifs_share_their_resume_functions():
    compiled, rec = compile_strict(three_ifs)
    for x in signed_inputs():
        same(compiled(x), three_ifs(x))
    # torch.compile's count: the entry, then two resume functions after each `if`
    # (one per branch target), shared by every path that reaches them: 1 + 2 + 2 + 2.
    assert len(rec.graphs) == 7 and surge.counters["graphs"] == 7
    assert surge.counters["graph_breaks"] == 5 and surge.counters["recompiles"] == 0
    assert surge.counters["fallbacks"] == 0
    for x in signed_inputs():  # fresh inputs on every path: all served from the cache
        same(compiled(x), three_ifs(x))
    assert len(rec.graphs) == 7 and surge.counters["cache_misses"] == 7


def test_break_inside_a_resume_function_keeps_user_line_numbers():
    def branchy(x):
        if x.sum() > 0:
            x = x + 1
        if x.mean() > 0:
            raise ValueError("positive")
        return x

    compiled, _ = compile_strict(branchy)
    with pytest.raises(ValueError, match="positive") as raised:
        compiled(torch.ones(3))
    frames = [(f.name, f.lineno) for f in traceback.extract_tb(raised.value.__traceback__)]
    first = branchy.__code__.co_firstlineno
    assert ("branchy", first + 4) in frames, frames
    assert not any(name.startswith("__surge") for name, _ in frames), frames


class Block(nn.Module):
    def __init__(self, width=4, bias=True):
        super().__init__()
        self.lin = nn.Linear(width, width, bias=bias)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(self.lin(x)).relu() + x


def test_deep_copies_of_a_module_share_one_entry():
    block = Block()
    copies = [copy.deepcopy(block) for _ in range(9)]
    for c in copies:  # each copy its own weights: the graph must read them from the call's module
        nn.init.normal_(c.lin.weight)
    rec = Recorder()  # one backend: compiles with one backend share the code's cache
    for c in copies:
        compiled = surge.compile(c, backend=rec, options={"raise_internal_errors": True})
        x = torch.randn(2, 4)
        same(compiled(x), c(x))
    assert surge.counters["graphs"] == 1 and surge.counters["recompiles"] == 0
    assert surge.counters["fallbacks"] == 0 and surge.counters["cache_hits"] == 8
    # The parameters are graph inputs, not constants baked into the graph.
    placeholders = [n for n in rec.graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 5  # x, lin.weight, lin.bias, norm.weight, norm.bias
    assert not [n for n in rec.graphs[0].graph.nodes if n.op == "get_attr"]


def test_a_module_passed_as_an_argument_serves_every_alike_instance():
    def apply(block, x):
        return block(x) * 2

    compiled, rec = compile_strict(apply)
    blocks = [Block() for _ in range(4)]
    for b in blocks:
        x = torch.randn(3, 4)
        same(compiled(b, x), apply(b, x))
    assert len(rec.graphs) == 1 and surge.counters["recompiles"] == 0
    # What differs between instances is guarded: parameter shapes, missing parameters,
    # attribute values, submodule classes.
    for other in (Block(width=8), Block(bias=False)):
        x = torch.randn(3, other.lin.in_features)
        same(compiled(other, x), apply(other, x))
    changed = Block()
    changed.norm = nn.Identity()
    x = torch.randn(3, 4)
    same(compiled(changed, x), apply(changed, x))
    assert len(rec.graphs) == 4 and surge.counters["recompiles"] == 3


class Pair(nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.a, self.b = a, b
        self.calls = 0

    def forward(self, x):
        self.a.calls = getattr(self.a, "calls", 0) + 1
        self.b.calls = getattr(self.b, "calls", 0) + 1
        return self.a(x) + self.b(x)


def test_modules_the_trace_took_as_distinct_are_checked_distinct():
    def run(pair, x):
        return pair(x)

    compiled, rec = compile_strict(run)
    distinct = Pair(nn.Linear(4, 4), nn.Linear(4, 4))
    shared_lin = nn.Linear(4, 4)
    shared = Pair(shared_lin, shared_lin)
    eager_distinct, eager_shared = copy.deepcopy(distinct), copy.deepcopy(shared)
    x = torch.randn(2, 4)
    same(compiled(distinct, x), run(eager_distinct, x))
    same(compiled(shared, x), run(eager_shared, x))
    assert shared_lin.calls == eager_shared.a.calls == 2
    assert len(rec.graphs) == 2 and surge.counters["recompiles"] == 1


class Scaled(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.n = n

    def forward(self, x):
        return self.lin(x) * self.n


def test_int_attribute_of_a_module_is_guarded_by_value():
    module = Scaled(2)
    compiled, rec = compile_strict(module)
    for n in (2, 3, 2, 3):
        module.n = n
        x = torch.randn(2, 4)
        same(compiled(x), module(x))
    assert len(rec.graphs) == 2 and surge.counters["recompiles"] == 1


def test_frame_without_tensor_work_hands_no_graph_to_the_backend():
    def rearrange(a, b, n):
        return (b, a), n * 2 + 1, [a] * n

    compiled, rec = compile_strict(rearrange)
    for _ in range(2):
        a, b = torch.randn(2), torch.randn(3)
        out = compiled(a, b, 2)
        same(out, rearrange(a, b, 2))
        assert out[0][0] is b and out[2][1] is a
    assert rec.graphs == [] and surge.counters["graphs"] == 0
    assert surge.counters["fallbacks"] == 0 and surge.counters["cache_hits"] == 1
