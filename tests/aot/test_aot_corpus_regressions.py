"""Regressions found by running the capture corpus through aot_eager: whole programs
compiled with surge.compile, compared with eager (values, requires_grad, aliasing,
global state) and with the fallback counter checked."""
import pytest
import torch
import torch.nn as nn

import surge


@pytest.fixture(autouse=True)
def fresh_state():
    surge.reset()
    surge.counters.reset()
    grad_enabled = torch.is_grad_enabled()
    yield
    torch.set_grad_enabled(grad_enabled)


def leaf(*shape):
    return torch.randn(*shape).requires_grad_()


def test_equal_values_under_different_grad_modes_stay_separate_outputs():
    def no_grad_then_grad(x, w):
        with torch.no_grad():
            frozen = x @ w
        live = x @ w          # CSE makes this the same ATen node as ``frozen``
        return frozen, live

    compiled = surge.compile(no_grad_then_grad, backend="aot_eager")
    for _ in range(2):
        x, w = leaf(3, 4), leaf(4, 2)
        frozen, live = compiled(x, w)
        e_frozen, e_live = no_grad_then_grad(x, w)
        assert (frozen.requires_grad, live.requires_grad) == (e_frozen.requires_grad, e_live.requires_grad)
        assert frozen.untyped_storage().data_ptr() != live.untyped_storage().data_ptr()
        torch.testing.assert_close(live, e_live)
        live.sum().backward()
        torch.testing.assert_close(w.grad, x.detach().sum(0)[:, None].expand(4, 2))
    with torch.no_grad():   # the inference variant: an update of one must not show in the other
        a, b = compiled(torch.randn(3, 4), torch.randn(4, 2))
        before = b.clone()
        a.add_(1)
        torch.testing.assert_close(b, before)
    assert surge.counters["fallbacks"] == 0


def test_mutated_input_aliasing_another_input_runs_eagerly_and_is_counted():
    def bump_then_read(a, b):
        a.add_(1.0)
        return b * 2

    compiled = surge.compile(bump_then_read, backend="aot_eager")
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y), y * 2)       # compiled for separate inputs
    assert surge.counters["fallbacks"] == 0
    x = torch.randn(3)
    expected = (x + 1.0) * 2
    torch.testing.assert_close(compiled(x, x), expected)    # same tensor twice
    expected = (x + 1.0) * 2
    torch.testing.assert_close(compiled(x, x), expected)
    assert surge.counters["fallbacks"] == 1                 # counted once, logged once
    base = torch.randn(4)
    expected_base = base + 1.0
    # a view of it (new shapes: a new graph, traced with the aliasing, run eagerly)
    torch.testing.assert_close(compiled(base, base[1:3]), expected_base[1:3] * 2)
    torch.testing.assert_close(base, expected_base)
    assert surge.counters["fallbacks"] == 2


def test_inputs_at_the_same_addresses_in_a_shared_storage_run_eagerly():
    """Whether an updated input shares memory with another is known from where each input's
    storage starts, not from the data pointers alone: the same two addresses are first two
    storages of their own, then views into one storage, which must run eagerly."""
    def bump_then_read(a, b):
        a.add_(1.0)
        return b * 2

    compiled = surge.compile(bump_then_read, backend="aot_eager")
    memory = bytearray(32)
    apart = (torch.frombuffer(memory, dtype=torch.float32, count=4),
             torch.frombuffer(memory, dtype=torch.float32, count=4, offset=16))
    for _ in range(2):   # compiled, then the same addresses again
        expected_b = apart[1] * 2
        torch.testing.assert_close(compiled(*apart), expected_b)
    assert surge.counters["fallbacks"] == 0
    shared = torch.frombuffer(memory, dtype=torch.float32, count=8)
    views = (shared[:4], shared[4:])
    assert [v.data_ptr() for v in views] == [t.data_ptr() for t in apart]
    before = views[1].clone()
    torch.testing.assert_close(compiled(*views), before * 2)
    assert surge.counters["fallbacks"] == 1


def test_grad_mode_set_by_the_program_persists_after_the_call():
    def freeze(x):
        torch.set_grad_enabled(False)
        return x * 2

    compiled = surge.compile(freeze, backend="aot_eager")
    out = compiled(leaf(3))
    assert not out.requires_grad
    assert not torch.is_grad_enabled()


def test_requires_grad_set_on_an_input_falls_back_with_eager_semantics():
    def track(x):
        x.requires_grad_(True)
        return x * 2

    compiled = surge.compile(track, backend="aot_eager")
    x = torch.randn(3)
    out = compiled(x)
    assert x.requires_grad and out.requires_grad
    assert surge.counters["fallbacks"] >= 1


@pytest.mark.parametrize("layer", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
def test_recurrent_layer_training_matches_eager(layer):
    # On CPU these layers run mkldnn_rnn_layer, whose workspace (needed by the
    # backward) is only produced with grad on: aot traces the cell math instead.
    torch.manual_seed(0)
    rnn = layer(6, 4, batch_first=True)
    reference = layer(6, 4, batch_first=True)
    reference.load_state_dict(rnn.state_dict())
    compiled = surge.compile(rnn, backend="aot_eager")
    x = torch.randn(2, 3, 6)
    out, _ = compiled(x)
    expected, _ = reference(x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    out.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    for p, q in zip(rnn.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert surge.counters["fallbacks"] == 0


def test_ambient_autocast_gets_its_own_variant_with_the_casts_traced():
    def linear_act(x, w):
        return torch.relu(x @ w) + 1

    compiled = surge.compile(linear_act, backend="aot_eager")
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    assert compiled(x, w).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = compiled(x, w), linear_act(x, w)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)
    assert compiled(x, w).dtype == torch.float32
    assert surge.counters["fallbacks"] == 0
