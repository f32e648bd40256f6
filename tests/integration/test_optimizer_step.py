"""torch.optim's ``opt.step()`` compiled: in a step function and in a whole training step.

After several steps on fresh gradients the parameters and every state tensor
(``exp_avg``, ``exp_avg_sq``, ``step``, ``momentum_buffer``) equal eager's; the step
is one graph with no break, and its step counters (tensors that change every call)
cause no recompile.
"""
import pytest
import torch

import surge

OPTIMIZERS = {
    "sgd_momentum": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, momentum=0.9, **kw),
    "adam": lambda ps, **kw: torch.optim.Adam(ps, lr=0.01, **kw),
    "adamw": lambda ps, **kw: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, **kw),
}
FOREACH = {"default": {}, "foreach": {"foreach": True}, "single": {"foreach": False}}
STEPS = 5


def _params(seed=0, n=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(4 + i, 3, generator=g)) for i in range(n)]


def _twins(name, foreach, n=3):
    params, ref = _params(n=n), _params(n=n)
    kw = FOREACH[foreach]
    return params, OPTIMIZERS[name](params, **kw), ref, OPTIMIZERS[name](ref, **kw)


def _set_grads(params, ref):
    for p, r in zip(params, ref):
        p.grad = torch.randn_like(p)
        r.grad = p.grad.clone()


def _assert_same_state(opt, ref_opt, atol=1e-6):
    for group, ref_group in zip(opt.param_groups, ref_opt.param_groups):
        for p, r in zip(group["params"], ref_group["params"]):
            torch.testing.assert_close(p.detach(), r.detach(), rtol=1e-5, atol=atol)
            assert (p in opt.state) == (r in ref_opt.state)
            state, ref_state = opt.state.get(p, {}), ref_opt.state.get(r, {})
            assert state.keys() == ref_state.keys()
            for key in state:
                torch.testing.assert_close(state[key], ref_state[key], rtol=1e-5, atol=atol)


def _expected_graphs(name):
    # SGD makes its momentum buffers in its first update (clone of the gradient): the
    # second step has state the first had not, one recompile (as under torch.compile).
    return 2 if name == "sgd_momentum" else 1


@pytest.mark.parametrize("backend", ["aot_eager", "cpp"])
@pytest.mark.parametrize("foreach", list(FOREACH))
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_step_function_matches_eager(name, foreach, backend):
    params, opt, ref, ref_opt = _twins(name, foreach)

    def step():
        opt.step()

    compiled = surge.compile(step, backend=backend, fullgraph=True)
    for _ in range(STEPS):
        _set_grads(params, ref)
        compiled()
        ref_opt.step()
        _assert_same_state(opt, ref_opt)
    assert surge.counters["graph_breaks"] == 0
    assert surge.counters["fallbacks"] == 0
    assert surge.counters["graphs"] == _expected_graphs(name)
    assert surge.counters["recompiles"] == _expected_graphs(name) - 1


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def train_step(model, opt, x):
    opt.zero_grad()
    loss = (model(x) * torch.arange(3.0)).sum()
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("backend", ["aot_eager", "cpp"])
@pytest.mark.parametrize("name", ["sgd_momentum", "adamw"])
def test_whole_training_step_matches_eager(name, backend):
    model, ref = _model(), _model()
    opt, ref_opt = OPTIMIZERS[name](model.parameters()), OPTIMIZERS[name](ref.parameters())
    compiled = surge.compile(train_step, backend=backend)
    for _ in range(STEPS):
        x = torch.randn(6, 5)
        # the gradients come from a compiled backward (its own summation order)
        torch.testing.assert_close(compiled(model, opt, x), train_step(ref, ref_opt, x), rtol=1e-4, atol=1e-5)
        _assert_same_state(opt, ref_opt, atol=1e-5)
    # zero_grad (torch marks it not to be compiled) and backward are breaks; the forward
    # with its loss is one graph and the step another, as under torch.compile.
    assert surge.counters["graphs"] == 1 + _expected_graphs(name)
    assert surge.counters["graph_breaks"] == 2
    assert surge.counters["fallbacks"] == 0


@pytest.mark.parametrize("name", ["sgd_momentum", "adamw"])
def test_step_on_triton_interpreter(name):
    params, opt, ref, ref_opt = _twins(name, "foreach", n=2)
    compiled = surge.compile(lambda: opt.step(), backend="triton")
    for _ in range(3):
        _set_grads(params, ref)
        compiled()
        ref_opt.step()
        _assert_same_state(opt, ref_opt)
    assert surge.counters["fallbacks"] == 0
    assert surge.counters["graphs"] == _expected_graphs(name)


def test_float_lr_change_recompiles_and_tensor_lr_does_not():
    for lr, expected_graphs in ((0.01, STEPS), (torch.tensor(0.01), 1)):
        surge.reset()
        surge.counters.reset()
        params, ref = _params(), _params()
        opt = torch.optim.Adam(params, lr=lr)
        ref_opt = torch.optim.Adam(ref, lr=lr.clone() if isinstance(lr, torch.Tensor) else lr)
        compiled = surge.compile(lambda: opt.step(), backend="cpp")
        for i in range(STEPS):
            _set_grads(params, ref)
            for group in (opt.param_groups[0], ref_opt.param_groups[0]):
                if isinstance(lr, torch.Tensor):
                    group["lr"].fill_(0.01 * (i + 1))
                else:
                    group["lr"] = 0.01 * (i + 1)
            compiled()
            ref_opt.step()
            _assert_same_state(opt, ref_opt)
        # a Python lr is a constant of the graph (guarded by value); a tensor lr an input
        assert surge.counters["graphs"] == expected_graphs
        assert surge.counters["fallbacks"] == 0


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_in_compiled_code(set_to_none):
    params, opt, ref, ref_opt = _twins("adam", "default")
    _set_grads(params, ref)

    def clear():
        opt.zero_grad(set_to_none=set_to_none)

    surge.compile(clear)()
    ref_opt.zero_grad(set_to_none=set_to_none)
    for p, r in zip(params, ref):
        assert (p.grad is None) == (r.grad is None) == set_to_none
        if not set_to_none:
            assert torch.equal(p.grad, r.grad)


def test_parameters_without_gradient_are_skipped_like_eager():
    params, opt, ref, ref_opt = _twins("adam", "default")
    compiled = surge.compile(lambda: opt.step(), backend="cpp")
    for _ in range(3):
        _set_grads(params, ref)
        params[1].grad = ref[1].grad = None
        compiled()
        ref_opt.step()
        _assert_same_state(opt, ref_opt)
    assert not opt.state.get(params[1]) and not ref_opt.state.get(ref[1])
    assert surge.counters["graphs"] == 1


def test_adam_over_ten_parameters_kernel_count():
    """One update kernel per parameter (parameter, both moments in one pass) and one per
    step counter: 20 kernels, what torch.compile's Inductor makes on the CPU."""
    params = [torch.nn.Parameter(torch.randn(16 * (i + 1), 8)) for i in range(10)]
    opt = torch.optim.Adam(params, lr=0.01)
    compiled = surge.compile(lambda: opt.step(), backend="cpp")
    for p in params:
        p.grad = torch.randn_like(p)
    compiled()
    assert surge.counters["kernels"] <= 20


def test_torch_compile_with_surge_backend_lowers_foreach_ops():
    """Dynamo hands surge's backend graphs of torch._foreach_* calls (contract 1)."""
    params, opt, ref, ref_opt = _twins("adamw", "foreach")
    compiled = torch.compile(lambda: opt.step(), backend=surge.backend)
    for _ in range(3):
        _set_grads(params, ref)
        compiled()
        ref_opt.step()
        _assert_same_state(opt, ref_opt)
    assert surge.counters["fallbacks"] == 0


def test_step_after_torch_compile_patched_the_optimizer_classes():
    """torch.compile wraps every optimizer class's _init_group in Dynamo's disable once it
    runs in a process; surge still captures the step in one graph."""
    warm, warm_opt, _, _ = _twins("adam", "default")
    _set_grads(warm, [p.detach().clone() for p in warm])
    torch.compile(lambda: warm_opt.step(), backend="eager")()
    params, opt, ref, ref_opt = _twins("adamw", "default")
    compiled = surge.compile(lambda: opt.step(), backend="cpp", fullgraph=True)
    for _ in range(3):
        _set_grads(params, ref)
        compiled()
        ref_opt.step()
        _assert_same_state(opt, ref_opt)
    assert surge.counters["graphs"] == 1 and surge.counters["graph_breaks"] == 0


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_capturable_path_matches_eager(name):
    """capturable=True (what a CUDA step takes when compiled: step counters on the device,
    bias corrections as tensor ops) computes eager's step; eager refuses it on the CPU, so
    the reference is the default path."""
    params, ref = _params(), _params()
    opt = OPTIMIZERS[name](params, capturable=True, foreach=True)
    ref_opt = OPTIMIZERS[name](ref)
    compiled = surge.compile(lambda: opt.step(), backend="cpp", fullgraph=True)
    for _ in range(STEPS):
        _set_grads(params, ref)
        compiled()
        ref_opt.step()
        _assert_same_state(opt, ref_opt)
    assert surge.counters["graphs"] == 1
