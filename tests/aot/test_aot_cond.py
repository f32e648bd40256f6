"""torch.cond in surge's ATen graphs: both branches traced, one ``where`` per output,
and a backward that is each branch's own vector-Jacobian product selected the same
way (aot/cond.py). Forward and backward against eager torch.cond."""
import pytest
import torch

import surge

BACKENDS = ["aot_eager", "default"]


def compiled(fn, backend, **kwargs):
    return surge.compile(fn, backend=backend, fullgraph=True, options={"raise_internal_errors": True}, **kwargs)


def grads_of(fn, x, w):
    x = x.clone().requires_grad_()
    w = w.clone().requires_grad_()
    out = fn(x, w)
    out.sum().backward()
    return out.detach(), x.grad, w.grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_matches_eager_on_both_paths(backend):
    def f(x, w):
        def t(a, b):
            return (a @ b).tanh()
        def e(a, b):
            return (a * 2) @ b.exp()
        return torch.cond(x.mean() > 0, t, e, (x, w)) * 3

    c = compiled(f, backend)
    for sign in (1.0, -1.0, 1.0, -1.0):
        x, w = torch.rand(3, 4) * sign, torch.randn(4, 2)
        for a, b in zip(grads_of(c, x, w), grads_of(f, x, w)):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_untaken_branch_with_an_infinite_derivative_leaves_no_nan(backend):
    def f(x, w):
        # At x == 0 the true branch's derivative is infinite; the predicate is False
        # there, and eager's gradient is the false branch's (2 * w).
        return torch.cond(x.min() > 0, lambda a, b: a.sqrt() * b, lambda a, b: a * 2 * b, (x, w))

    x = torch.zeros(5)
    w = torch.randn(5)
    for a, b in zip(grads_of(compiled(f, backend), x, w), grads_of(f, x, w)):
        torch.testing.assert_close(a, b)
        assert not torch.isnan(a).any()


def test_inference_graph_has_a_where_and_no_cond():
    from surge.aot import trace_aten

    def f(x):
        return torch.cond(x.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), (x,))

    graphs = []

    def backend(gm, inputs):
        graphs.append(trace_aten(gm, inputs))
        return gm.forward

    surge.compile(f, backend=backend, fullgraph=True)(torch.randn(4))
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert "aten.where.self" in targets and not any("cond" in t for t in targets)


def test_a_random_op_in_a_branch_is_refused_by_the_backend():
    def f(x):
        return torch.cond(x.sum() > 0, lambda a: a + torch.rand_like(a), lambda a: a - 1, (x,))

    with pytest.raises(surge.errors.BackendCompilerFailed):
        surge.compile(f, backend="aot_eager", fullgraph=True)(torch.ones(3))
    torch.manual_seed(0)
    expected = f(-torch.ones(3))
    out = surge.compile(f, backend="aot_eager", options={"warn_fallbacks": False})(-torch.ones(3))
    torch.testing.assert_close(out, expected)


def test_torch_compile_with_surge_backend_runs_dynamos_cond_graph():
    import torch._dynamo

    def f(x, y):
        return torch.cond(x.sum() > 0, lambda a, b: a * b, lambda a, b: a + b, (x, y)) + 1

    torch._dynamo.reset()
    c = torch.compile(f, backend=surge.backend, fullgraph=True)
    for sign in (1.0, -1.0):
        x, y = torch.rand(4) * sign, torch.randn(4)
        torch.testing.assert_close(c(x, y), f(x, y))


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_parameters_read_in_branches_get_their_gradients(backend):
    class Gated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda v: self.a(v).relu(), lambda v: self.b(v).sigmoid(), (x,))

    torch.manual_seed(0)
    eager = Gated()
    model = Gated()
    model.load_state_dict(eager.state_dict())
    compiled_model = surge.compile(model, backend=backend, fullgraph=True, options={"raise_internal_errors": True})
    for sign in (1.0, -1.0):
        x = torch.rand(2, 4) * sign
        eager(x).sum().backward()
        compiled_model(x).sum().backward()
        for p, q in zip(eager.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad)
