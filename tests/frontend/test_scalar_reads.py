"""Values read back from tensors and Python numbers that change: never a constant guarded
by value that recompiles on every call.

Without ``capture_scalar_outputs`` a read (``.item()``, ``int(t)``, ``.tolist()``) breaks
the graph and its value reaches the resume function as an argument, symbolic once it
changed: at most two graphs over any number of values. With the option the read stays in
the graph (one graph, no break). Both on every backend: the kernel backends take changing
numbers as 0-d tensors. Each program runs over changing values against eager.
"""
import math
import types

import pytest
import torch

import surge
from surge.options import Options

ALL_BACKENDS = ["eager", "aot_eager", "cpp"]
CAPTURE = {"capture_scalar_outputs": True}


def _run(fn, backend, make_args, calls=10, options=None, **kw):
    compiled = surge.compile(fn, backend=backend, options=options, **kw)
    for i in range(calls):
        args = make_args(i)
        expected, got = fn(*args), compiled(*args)
        _close(expected, got)
    return surge.counters["graphs"], surge.counters["graph_breaks"], surge.counters["recompiles"]


def _close(a, b):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b)
    else:
        assert type(a) is type(b) and a == pytest.approx(b)


def scale_by_item(x, s):
    v = s.item()
    return x * (v * 2 + 1) + math.sqrt(v)


def _scale_args(i):
    return torch.randn(4, 3), torch.tensor(0.5 + i)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_item_read_breaks_and_its_value_turns_symbolic_once(backend):
    graphs, breaks, recompiles = _run(scale_by_item, backend, _scale_args)
    # the graph before the break has no work; the resume function: static, then symbolic
    assert (graphs, breaks, recompiles) == (2, 1, 1)
    assert surge.counters["fallbacks"] == 0


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_item_read_stays_in_the_graph_with_capture_scalar_outputs(backend):
    assert _run(scale_by_item, backend, _scale_args, options=CAPTURE) == (1, 0, 0)


def _conversions(x, s, pair):
    a, b = pair.tolist()
    return x * int(s) + float(s) * a - b


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_int_float_and_tolist_reads_in_one_graph(backend):
    def args(i):
        return torch.randn(5), torch.tensor(i + 2.7), torch.tensor([i + 1.0, 2.0 - i])
    assert _run(_conversions, backend, args, options=CAPTURE) == (1, 0, 0)


def test_read_meets_an_int_tensor_with_python_promotion():
    def f(xi, s):
        return xi * s.item() + xi * int(s)
    assert _run(f, "cpp", lambda i: (torch.randint(0, 4, (6,)), torch.tensor(i + 0.5)),
                calls=4, options=CAPTURE) == (1, 0, 0)


def schedule(x, lr, step):
    warm = min(step, 4) / 4
    return x * (lr * warm) + step // 2 - math.cos(lr * math.pi)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_learning_rate_and_step_arguments_make_at_most_two_graphs(backend):
    graphs, breaks, recompiles = _run(schedule, backend, lambda i: (torch.randn(6), 0.01 * (i + 1), i + 2))
    assert graphs <= 2 and recompiles <= 1 and breaks == 0


def _powers(x, step, lr):
    return x * (0.95 ** step) + x * (step ** 0.5) + x * (2 ** step) + x * (lr ** 2) * (2 ** lr)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_powers_with_a_symbolic_exponent_stay_symbolic(backend):
    # 0.95 ** step once computed the hint's power without a guard: a wrong cache hit
    graphs, _, recompiles = _run(_powers, backend, lambda i: (torch.ones(3), i + 2, 0.1 * i + 0.3), calls=6)
    assert (graphs, recompiles) == (2, 1)


def _rounded(x, lr, total):
    warm = int(lr * total)
    return x * warm + math.floor(lr * 10) + math.ceil(total / 3) + x * math.trunc(-lr * 7)


@pytest.mark.parametrize("backend", ["eager", "cpp"])
def test_int_floor_ceil_trunc_of_symbolic_numbers_stay_symbolic(backend):
    graphs, _, recompiles = _run(_rounded, backend, lambda i: (torch.ones(2), 0.13 * i + 0.2, 10 + i), calls=6)
    assert (graphs, recompiles) == (2, 1)


def test_number_used_as_a_size_on_a_kernel_backend_compiles_static():
    def f(x, n, lr):
        return x[:n] * lr
    graphs, _, _ = _run(f, "cpp", lambda i: (torch.randn(8), 3 + i % 2, 0.1 * (i + 1)), calls=4)
    assert graphs == 3   # the first, static; then one per value of n, each with lr a 0-d tensor input


def _branch_on_read(x, s):
    v = s.item()
    if v > 3:
        return x + v
    return x - v


def test_a_decision_on_a_read_breaks_and_explain_says_why():
    _run(_branch_on_read, "eager", lambda i: (torch.randn(3), torch.tensor(float(i))), options=CAPTURE)
    assert surge.counters["graph_breaks"] == 1 and surge.counters["recompiles"] <= 2
    surge.reset()
    report = surge.explain(_branch_on_read, backend="eager", options=CAPTURE)(torch.randn(3), torch.tensor(1.0))
    assert "capture_scalar_outputs could not keep it: a condition needs the value read back" in str(report)
    report = surge.explain(_branch_on_read, backend="eager")(torch.randn(3), torch.tensor(1.0))
    assert "options={'capture_scalar_outputs': True} keeps the value" in str(report)


def test_fullgraph_names_the_read_it_cannot_keep():
    f = surge.compile(_branch_on_read, backend="eager", fullgraph=True, options=CAPTURE)
    with pytest.raises(Exception, match="item"):
        f(torch.randn(3), torch.tensor(1.0))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_training_through_an_item_scaled_loss(backend):
    def step(w, x, s):
        loss = (x @ w).pow(2).mean() * s.item()
        loss.backward()
        return loss.detach()
    compiled = surge.compile(step, backend=backend, options=CAPTURE)
    for i in range(4):
        x, s = torch.randn(4, 3), torch.tensor(0.5 + i, requires_grad=True)
        w = torch.randn(3, 2, requires_grad=True)
        w2, s2 = w.detach().clone().requires_grad_(True), s.detach().clone().requires_grad_(True)
        torch.testing.assert_close(step(w, x, s), compiled(w2, x, s2))
        torch.testing.assert_close(w.grad, w2.grad)
        assert s2.grad is None   # .item() is out of autograd, in the graph as in eager
    assert surge.counters["recompiles"] == 0


def test_torch_dynamo_config_is_honoured_when_already_imported(monkeypatch):
    import sys

    assert Options.from_env().capture_scalar_outputs is False
    fake = types.SimpleNamespace(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=False)
    monkeypatch.setitem(sys.modules, "torch._dynamo.config", fake)
    assert Options.from_env().capture_scalar_outputs is True
    monkeypatch.setenv("SURGE_CAPTURE_SCALAR_OUTPUTS", "1")
    monkeypatch.delitem(sys.modules, "torch._dynamo.config")
    assert Options.from_env().capture_scalar_outputs is True


# ---- data-dependent sizes (capture_dynamic_output_shape_ops) ---------------------------

DYNAMIC_OUTPUTS = {"capture_dynamic_output_shape_ops": True, "capture_scalar_outputs": True}


def _nonzero_rows(x):
    idx = torch.nonzero(x > 0)
    return idx * 2, idx.sum()


def _masked(x, y):
    sel = x[x > 0]
    return sel * 2 + 1, sel.exp().sum() + y.sum(), torch.masked_select(y, y > 0.5).sum()


def _zeros_of_read(x, n):
    return torch.zeros(n.item()) + 1, x * 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn, make_args", [
    (_nonzero_rows, lambda i: (torch.randn(5, 3),)),
    (_masked, lambda i: (torch.randn(6, 2), torch.rand(4))),
    (_zeros_of_read, lambda i: (torch.randn(3), torch.tensor(i + 2))),
])
def test_data_dependent_sizes_stay_in_one_graph_under_fullgraph(backend, fn, make_args):
    assert _run(fn, backend, make_args, calls=5, fullgraph=True, options=DYNAMIC_OUTPUTS) == (1, 0, 0)


def test_without_the_option_a_data_dependent_size_breaks_and_says_how_to_keep_it():
    with pytest.raises(Exception, match="capture_dynamic_output_shape_ops': True} keeps it"):
        surge.compile(_nonzero_rows, backend="eager", fullgraph=True)(torch.randn(4, 2))
    surge.reset()
    graphs, breaks, _ = _run(_nonzero_rows, "eager", lambda i: (torch.randn(5, 3),), calls=3)
    assert breaks == 1


def test_a_kernel_backend_refuses_a_data_dependent_size_naming_the_line():
    f = surge.compile(_masked, backend="cpp", fullgraph=True, options=DYNAMIC_OUTPUTS)
    with pytest.raises(Exception, match=r"cannot take a size that depends on data \(boolean-mask indexing at "
                                        r".*test_scalar_reads.py:\d+\)"):
        f(torch.randn(6, 2), torch.rand(4))


def test_a_decision_on_a_data_dependent_size_breaks():
    def f(x):
        idx = torch.nonzero(x)
        if idx.shape[0] == 0:
            return x
        return idx.float().mean() + x
    graphs, breaks, _ = _run(f, "eager", lambda i: (torch.randn(4) * (i % 2),), calls=4,
                             options=DYNAMIC_OUTPUTS)
    assert breaks == 1


def test_training_through_a_boolean_mask():
    def step(x, w):
        loss = (x @ w)[x[:, 0] > 0].pow(2).sum()
        loss.backward()
        return loss.detach()
    compiled = surge.compile(step, backend="aot_eager", options=DYNAMIC_OUTPUTS)
    for _ in range(3):
        x, w = torch.randn(6, 3), torch.randn(3, 2, requires_grad=True)
        w2 = w.detach().clone().requires_grad_(True)
        torch.testing.assert_close(step(x, w), compiled(x, w2))
        torch.testing.assert_close(w.grad, w2.grad)
    assert surge.counters["fallbacks"] == 0
