"""Cache entries: one generated check-and-run function each, recompiles, limits, provenance."""
import inspect
import logging

import pytest
import torch

import surge
from frontend_helpers import compile_strict, same

from surge.frontend import native_checks
from surge.frontend.cache import cache_for


def block(x, w, b, r):
    return torch.nn.functional.gelu(x @ w + b) + r


def block_args():
    return torch.randn(4, 8), torch.randn(8, 8), torch.randn(8), torch.randn(4, 8)


def entries_of(fn, backend):
    return cache_for(fn.__code__, backend, False).entries


def test_first_example_end_to_end():
    def f(x, y):
        return torch.relu(x @ y) + 1

    compiled, rec = compile_strict(f)
    for _ in range(3):
        x, y = torch.randn(3, 4), torch.randn(4, 5)
        same(compiled(x, y), f(x, y))
    assert len(rec.graphs) == 1
    assert rec.ops() == ["matmul", "relu", "add"]
    assert surge.counters["cache_hits"] == 2 and surge.counters["cache_misses"] == 1


@pytest.mark.parametrize("batched", [False, True], ids=["inline", "batched"])
def test_each_entry_is_one_generated_function_with_every_guard(monkeypatch, batched):
    # The tensors are checked inline, or (native_checks.py) in one call after the other guards.
    monkeypatch.setattr(native_checks, "batching", lambda: batched)
    compiled, rec = compile_strict(block)
    compiled(*block_args())
    (entry,) = entries_of(block, rec)
    source = entry.source
    assert source.startswith("def surge_entry_")
    # Straight-line checks, no loop over a guard list.
    code_lines = [line.split("#")[0] for line in source.splitlines()]
    assert not any(line.strip().startswith(("for ", "while ")) for line in code_lines)
    tensor_facts = ("dtype is", "stride()", "requires_grad is False", ".shape == (4, 8)")
    for text in ("is_grad_enabled()", "get_default_dtype()") + (("4 tensors: ",) if batched else tensor_facts):
        assert text in source, text
    assert batched == ("dtype is" not in source)
    assert "out = compiled(" in source
    # Every guard's readable form is listed.
    assert "L['x']: Tensor(float32, cpu, shape=[4, 8], stride=[8, 1]" in entry.guards_text


def test_graph_nodes_carry_metadata_and_user_provenance():
    compiled, rec = compile_strict(block)
    args = block_args()
    compiled(*args)
    gm = rec.graphs[0]
    line = inspect.getsourcelines(block)[1] + 1
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "call_function"):
            val = node.meta["val"]
            assert val.device.type == "meta" and node.meta["device"] == torch.device("cpu")
        if node.op == "call_function":
            assert f'{__file__}", line {line}' in node.meta["stack_trace"]
    # The backend gets the call's real tensors, in placeholder order.
    assert all(a is b for a, b in zip(rec.example_inputs[0], args))


def test_recompile_logs_the_failing_guard(monkeypatch, capsys):
    monkeypatch.setenv("SURGE_LOGS", "recompiles")
    compiled, rec = compile_strict(block)
    compiled(*block_args())
    x, w, b, r = block_args()
    compiled(x.double(), w.double(), b.double(), r.double())
    err = capsys.readouterr().err
    assert "recompiling block" in err and "L['x']: Tensor(float32" in err
    assert surge.counters["recompiles"] == 1 and len(rec.graphs) == 2


def test_entries_are_tried_in_order_and_both_hit():
    compiled, rec = compile_strict(block)
    small, large = block_args(), [torch.randn(6, 8), torch.randn(8, 8), torch.randn(8), torch.randn(6, 8)]
    for _ in range(2):
        same(compiled(*small), block(*small))
        same(compiled(*large), block(*large))
    assert len(rec.graphs) == 2 and surge.counters["cache_hits"] == 2


def test_cache_size_limit_from_options_then_eager(caplog):
    def power(x, n):
        return x * n

    # dynamic=False: a changing int would otherwise become symbolic (one graph for n >= 2)
    compiled, rec = compile_strict(power, dynamic=False, options={"cache_size_limit": 2})
    with caplog.at_level(logging.WARNING, logger="surge"):
        for n in range(6):
            x = torch.randn(3)
            same(compiled(x, n), power(x, n))
    assert len(rec.graphs) == 3 and surge.counters["recompiles"] == 2
    assert sum("runs eagerly" in r.getMessage() for r in caplog.records) == 1


def test_reset_drops_entries():
    compiled, rec = compile_strict(block)
    compiled(*block_args())
    surge.reset()
    compiled(*block_args())
    assert len(rec.graphs) == 2


def test_default_backend_captures_one_entry():
    compiled = surge.compile(block)
    args = block_args()
    same(compiled(*args), block(*args))
    assert compiled._surge_cache.entries[0].graph is not None


def test_keyword_and_default_binding_shares_an_entry():
    def scaled(x, scale=2.0, *, shift=0.0):
        return x * scale + shift

    compiled, rec = compile_strict(scaled)
    x = torch.randn(3)
    same(compiled(x), scaled(x))
    same(compiled(x, 2.0), scaled(x, 2.0))
    same(compiled(x, scale=2.0, shift=0.0), scaled(x))
    assert len(rec.graphs) == 1
    same(compiled(x, shift=1.0), scaled(x, shift=1.0))
    assert len(rec.graphs) == 2


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="'fastest' is not a mode"):
        surge.compile(block, mode="fastest")


@pytest.mark.parametrize("mode, cudagraphs, autotune", [
    ("default", False, False), ("reduce-overhead", True, False), ("max-autotune", True, True),
    ("max-autotune-no-cudagraphs", False, True)])
def test_modes_turn_on_their_options(mode, cudagraphs, autotune):
    options = surge.api.build_options(backend=None, fullgraph=False, dynamic=None, mode=mode, options=None)
    assert (options.cudagraphs, options.autotune) == (cudagraphs, autotune)


def test_dynamic_other_than_none_true_false_is_rejected():
    with pytest.raises(ValueError, match="dynamic='yes'"):
        surge.compile(block, dynamic="yes")


def test_decorator_forms():
    @surge.compile
    def a(x):
        return x + 1

    @surge.compile(backend="eager", fullgraph=True)
    def b(x):
        return x - 1

    x = torch.randn(2)
    same(a(x), x + 1)
    same(b(x), x - 1)


def test_a_backend_hears_when_a_capture_begins():
    """``before_capture`` (the Triton backend starts its compile workers there) runs once
    per capture, not for calls an entry serves."""
    began = []

    def backend(gm, example_inputs):
        return gm

    backend.before_capture = lambda args: began.append(len(args))
    compiled = surge.compile(lambda x: x.sin() + 1, backend=backend)
    for _ in range(3):
        compiled(torch.randn(3))
    compiled(torch.randn(4, 2))  # another shape: a second capture
    assert began == [1, 1]
