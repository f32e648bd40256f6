"""Tensor subclasses with ``__torch_function__``: the override runs for every torch
function, method, operator and property on them, as in eager, and is inlined into the
graph where torch.compile inlines it (one graph); results are re-wrapped as the
override says. Each test compares with eager on fresh inputs and the graph count with
torch.compile's on the same program."""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import surge
from frontend_helpers import compile_strict

LOG: list = []


def plain(value):
    """A value with its subclass tensors as plain tensors (compared without running
    overrides), and each tensor's class beside it."""
    if isinstance(value, torch.Tensor):
        return type(value), torch._C.TensorBase.as_subclass(value, torch.Tensor)
    if isinstance(value, (tuple, list)):
        return type(value), [plain(v) for v in value]
    return value


def assert_same(actual, expected):
    a, e = plain(actual), plain(expected)
    if isinstance(e, tuple) and len(e) == 2 and isinstance(e[1], torch.Tensor):
        assert a[0] is e[0], (a[0], e[0])
        torch.testing.assert_close(a[1], e[1])
    elif isinstance(e, tuple) and len(e) == 2 and isinstance(e[1], list):
        assert a[0] is e[0] and len(a[1]) == len(e[1])
        for x, y in zip(actual, expected):
            assert_same(x, y)
    else:
        assert a == e, (a, e)


def torch_compile_graphs(fn, *args) -> int:
    counter = torch._dynamo.testing.CompileCounter()
    torch._dynamo.reset()
    torch.compile(fn, backend=counter)(*args)
    return counter.frame_count


def run_both(fn, make_args, calls=3, **kwargs):
    """Eager and compiled, each on its own fresh inputs of one seed; LOG compared too."""
    compiled, rec = compile_strict(fn, **kwargs)
    for i in range(calls):
        torch.manual_seed(i)
        LOG.clear()
        expected = fn(*make_args())
        expected_log = list(LOG)
        torch.manual_seed(i)
        LOG.clear()
        actual = compiled(*make_args())
        assert LOG == expected_log, (LOG, expected_log)
        assert_same(actual, expected)
    return rec


class LoggingTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append(func.__name__)
        return super().__torch_function__(func, types, args, kwargs or {})


class Tagged(torch.Tensor):
    """The wrapper pattern: a tag kept as an instance attribute, results re-wrapped by
    hand with dispatch disabled, non-tensor results passed through."""

    def __new__(cls, data, tag):
        return torch.Tensor._make_subclass(cls, data)

    def __init__(self, data, tag):
        self.tag = tag

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tags = [a.tag for a in args if isinstance(a, Tagged)]
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) and not isinstance(out, Tagged):
            return Tagged(out, "+".join(tags))
        return out


class Inherits(torch.Tensor):
    """No override of its own: torch.Tensor's keeps results of this class."""

    def double_it(self):
        return self * 2


def test_logging_subclass_one_graph_and_the_override_runs_per_op():
    def f(x, y):
        z = x * 2 + y
        return torch.relu(z).sum(0), z.shape, isinstance(z, LoggingTensor)

    def make():
        return torch.randn(3, 4).as_subclass(LoggingTensor), torch.randn(3, 4)

    rec = run_both(f, make)
    assert len(rec.graphs) == 1 == torch_compile_graphs(f, *make())
    assert surge.counters["graph_breaks"] == 0


def test_operators_methods_and_reflected_operands_reach_the_override():
    def f(x, y):
        a = 1 - x          # Tensor.__rsub__
        b = y @ x.t()      # the plain operand first
        c = x[0] + x.view(-1)[:4]
        d = torch.cat([y, x]).mean()
        return a, b, c, d, x.size(0), x.dim()

    def make():
        return torch.randn(4, 4).as_subclass(LoggingTensor), torch.randn(4, 4)

    rec = run_both(f, make)
    assert len(rec.graphs) == 1  # (torch.compile 2.13 captures no graph of this one)


def test_wrapper_subclass_keeps_its_tag_through_ops_and_on_the_output():
    def f(x, w):
        h = torch.tanh(x @ w) + x
        return h, h.tag, h.sum() * 2

    def make():
        return Tagged(torch.randn(3, 3), "t"), torch.randn(3, 3)

    rec = run_both(f, make)
    assert len(rec.graphs) == 1  # (torch.compile 2.13 raises an internal error on this one)
    out = compile_strict(f)[0](*make())
    assert type(out[0]) is Tagged and out[0].tag == f(*make())[0].tag == "t+t" == out[1]


def test_subclass_built_in_the_frame_and_results_checked_with_isinstance():
    def f(x):
        t = Tagged(x, "made")
        u = t.exp()
        return u, u.tag, isinstance(u, Tagged), type(x * 1) is torch.Tensor

    rec = run_both(f, lambda: (torch.randn(5),))
    assert len(rec.graphs) == 1  # torch.compile raises an internal error on this one


def test_inherited_default_override_and_user_methods():
    def f(x):
        y = x.double_it().sin()
        return y, type(y).__name__

    rec = run_both(f, lambda: (torch.randn(4).as_subclass(Inherits),))
    assert len(rec.graphs) == 1 == torch_compile_graphs(f, torch.randn(4).as_subclass(Inherits))


def test_class_with_disabled_torch_function_behaves_as_a_plain_tensor():
    class NoDispatch(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl

    def f(x):
        return x.cos() + 1

    rec = run_both(f, lambda: (torch.randn(4).as_subclass(NoDispatch),))
    assert len(rec.graphs) == 1


def test_override_returning_not_implemented_and_two_subclasses():
    class Declines(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.mul:
                return NotImplemented
            return super().__torch_function__(func, types, args, kwargs or {})

    def outcome(fn, *args):
        try:
            return fn(*args)
        except TypeError as e:
            return "TypeError", str(e)

    cases = [lambda x, y: x.sin() + 1, lambda x, y: x * 2, lambda x, y: x + y, lambda x, y: torch.add(y, x),
             lambda x, y: x.mul(3), lambda x, y: x == y]
    for case in cases:
        compiled = compile_strict(case)[0]
        x, y = torch.randn(3).as_subclass(Declines), torch.randn(3).as_subclass(LoggingTensor)
        expected, actual = outcome(case, x, y), outcome(compiled, x, y)
        if isinstance(expected, tuple) and expected[0] == "TypeError":
            assert actual == expected
        else:
            assert_same(actual, expected)


def test_parameter_subclass_in_a_module_forward_and_backward():
    class MyParam(torch.nn.Parameter):
        pass

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = MyParam(torch.randn(4, 4))

        def forward(self, x):
            return (x @ self.w).relu().sum()

    torch.manual_seed(0)
    m = M()
    x = torch.randn(2, 4)
    m(x).backward()
    expected = m.w.grad.clone()
    m.w.grad = None
    compiled = surge.compile(m, backend="aot_eager", options={"raise_internal_errors": True})
    loss = compiled(x)
    loss.backward()
    torch.testing.assert_close(m.w.grad, expected)
    assert type(m.w) is MyParam


def test_training_through_a_logging_subclass_matches_eager_gradients():
    def f(x, w):
        return (x @ w).tanh().sum()

    base = torch.randn(3, 4)
    w = torch.randn(4, 2)
    grads = []
    for fn in (f, surge.compile(f, backend="aot_eager", options={"raise_internal_errors": True})):
        leaf = base.clone().requires_grad_()
        x = leaf.as_subclass(LoggingTensor)
        LOG.clear()
        fn(x, w).backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_override_that_prints_breaks_the_graph_cleanly():
    class Printing(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            print("op", func.__name__)
            return super().__torch_function__(func, types, args, kwargs or {})

    def f(x):
        return x.sin() * 2

    x = torch.randn(3).as_subclass(Printing)
    compiled = surge.compile(f, backend="eager")
    assert_same(compiled(x), f(x))
    assert_same(compiled(x), f(x))


def test_replacing_the_override_between_calls_recompiles():
    class Scaled(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))

    def f(x):
        return x + 1

    compiled, rec = compile_strict(f)
    x = torch.randn(3).as_subclass(Scaled)
    assert_same(compiled(x), f(x))

    def doubled(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {})) * 2

    Scaled.__torch_function__ = classmethod(doubled)
    assert_same(compiled(x), f(x))
    assert len(rec.graphs) == 2


def test_called_inside_disable_torch_function_subclass():
    def f(x):
        return x.cos()

    compiled, rec = compile_strict(f)
    x = torch.randn(3).as_subclass(LoggingTensor)
    for _ in range(2):
        LOG.clear()
        with torch._C.DisableTorchFunctionSubclass():
            expected = f(x)
            actual = compiled(x)
        assert LOG == [] and type(actual) is type(expected) is torch.Tensor
        LOG.clear()
        assert_same(compiled(x), f(x))


def test_subclass_values_live_across_a_graph_break():
    def f(x):
        y = x.sin()
        print("between")
        return y * 2, y.tag

    def make():
        return (Tagged(torch.randn(4), "b"),)

    compiled = surge.compile(f, backend="eager")
    for _ in range(2):
        args = make()
        assert_same(compiled(*args), f(*args))


def test_instance_attribute_of_an_input_changed_between_calls():
    def f(x):
        return x * 2, x.tag

    compiled, rec = compile_strict(f)
    x = Tagged(torch.randn(3), "one")
    assert_same(compiled(x), f(x))
    x.tag = "two"
    out = compiled(x)
    assert out[1] == "two" and out[0].tag == "two" and len(rec.graphs) == 2


def test_user_function_dispatching_through_handle_torch_function():
    from torch.overrides import handle_torch_function, has_torch_function

    def scale(t, k):
        if has_torch_function((t,)):
            return handle_torch_function(scale, (t,), t, k)
        return t * k

    class Intercepts(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is scale:
                LOG.append("scale")
                with torch._C.DisableTorchFunctionSubclass():
                    return args[0] * args[1] + 100
            return super().__torch_function__(func, types, args, kwargs or {})

    def f(x):
        return scale(x, 3), scale(x.as_subclass(torch.Tensor), 3)

    rec = run_both(f, lambda: (torch.randn(3).as_subclass(Intercepts),))
    assert len(rec.graphs) == 1


def test_override_calling_disabled_torch_function_impl_returns_plain_results():
    class Counting(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            LOG.append(func.__name__)
            return torch._C._disabled_torch_function_impl(func, types, args, kwargs or {})

    def f(x):
        y = x.exp() * 2
        return y, type(y) is torch.Tensor

    rec = run_both(f, lambda: (torch.randn(3).as_subclass(Counting),))
    assert len(rec.graphs) == 1 == torch_compile_graphs(f, torch.randn(3).as_subclass(Counting))


_LINEAR = torch.nn.Linear(4, 4)
# What a program does with a subclass tensor, each through the override as eager runs
# it (results, their classes and the override's log compared); some are graph breaks.
USES = {
    "stack": lambda x, y: torch.stack([x, y]),
    "unbind_split_max": lambda x, y: (x.unbind(0), x.split(2), x.max(dim=0)),
    "conversions": lambda x, y: (x.to(torch.float64), x.float()),
    "len_and_iteration": lambda x, y: (len(x), [r.sum() for r in x]),
    "metadata": lambda x, y: (x.size(), x.numel(), x.size(1), x.dtype, x.device, x.requires_grad),
    "comparisons": lambda x, y: ((x > 0).any(), x == y),
    "functional_and_module": lambda x, y: (torch.nn.functional.linear(x, y, None), _LINEAR(x)),
    "new_and_in_place": lambda x, y: (x.new_ones(3), x.clone().add_(1).mul_(2)),
    "properties": lambda x, y: (x.T, x.mT, x.data),
    "indexing": lambda x, y: (x[0, 1:], x[..., None], torch.where(x > 0, x, 0.0)),
    "data_dependent": lambda x, y: (x.sum().item() + 1, x * 2 if x.sum() > 0 else x * 3, x[x > 0]),
    "views_and_einsum": lambda x, y: (x.reshape(-1).view(2, 8).permute(1, 0), torch.einsum("ij,jk->ik", x, y)),
    "type_names": lambda x, y: (type(x * 1).__name__, x.__class__.__name__),
}


def _make(cls):
    def make():
        data = torch.randn(4, 4)
        return (Tagged(data, "a") if cls is Tagged else data.as_subclass(cls)), torch.randn(4, 4)
    return make


@pytest.mark.parametrize("cls", [LoggingTensor, Tagged, Inherits], ids=lambda c: c.__name__)
@pytest.mark.parametrize("use", list(USES), ids=str)
def test_uses_of_a_subclass_tensor_match_eager(cls, use):
    run_both(USES[use], _make(cls), calls=2)


def test_parameter_subclass_with_its_own_override_trains_and_logs_as_eager():
    class TaggedParam(torch.nn.Parameter):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            LOG.append(func.__name__)
            # Parameter's own __torch_function__ is _disabled_torch_function_impl: plain results.
            return super().__torch_function__(func, types, args, kwargs or {})

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = TaggedParam(torch.randn(4, 4))

        def forward(self, x):
            h = x @ self.w
            return h.relu().sum(), type(h).__name__

    torch.manual_seed(0)
    m = M()
    x = torch.randn(2, 4)
    LOG.clear()
    loss, name = m(x)
    loss.backward()
    expected_grad, expected_log = m.w.grad.clone(), list(LOG)
    for backend in ("eager", "aot_eager"):
        m.w.grad = None
        LOG.clear()
        loss, compiled_name = surge.compile(m, backend=backend, options={"raise_internal_errors": True})(x)
        loss.backward()
        torch.testing.assert_close(m.w.grad, expected_grad)
        assert LOG == expected_log and compiled_name == name == "Tensor" and type(m.w) is TaggedParam


def test_an_operator_both_overrides_decline_tries_the_reflected_method_as_python_does():
    def declining(name):
        def impl(cls, func, types, args=(), kwargs=None):
            LOG.append((name, func.__name__))
            if func is torch.Tensor.mul:
                return NotImplemented
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))
        return type(name, (torch.Tensor,), {"__torch_function__": classmethod(impl)})

    A, B = declining("A"), declining("B")

    def f(x, y):
        return x - y, x * y

    x, y = torch.randn(3).as_subclass(A), torch.randn(3).as_subclass(B)
    outcomes = []
    for fn in (f, compile_strict(f)[0]):
        LOG.clear()
        try:
            fn(x, y)
        except TypeError as e:
            outcomes.append((str(e), list(LOG)))
    assert len(outcomes) == 2 and outcomes[0] == outcomes[1]
    assert outcomes[0][1] == [("A", "sub"), ("A", "mul"), ("B", "mul"), ("B", "mul"), ("A", "mul")]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_in_place_methods_return_the_subclass_object_itself(backend):
    def f(x):
        y = x.add_(1)
        t = Tagged(x.detach().clone(), "k")
        u = t.mul_(2)
        return y is x, y, u is t, u.tag, (x * 1).sum()

    base = torch.randn(3)
    a, b = base.clone().as_subclass(LoggingTensor), base.clone().as_subclass(LoggingTensor)
    expected = f(a)
    actual = surge.compile(f, backend=backend, options={"raise_internal_errors": True})(b)
    assert actual[0] and actual[1] is b and actual[2] and actual[3] == "k"
    assert_same(actual[4], expected[4])
    assert_same(b, a)


def _as_subclass_identities(x):
    y = (x * 2).as_subclass(Inherits)
    back = y.as_subclass(torch.Tensor)
    again = y.as_subclass(Inherits)
    return (back, type(back).__name__, type(again).__name__, y is again, back is y, again is y,
            x.as_subclass(torch.Tensor) is x, [back][0] is back)


def test_as_subclass_makes_a_new_object_each_call():
    compiled, rec = compile_strict(_as_subclass_identities)
    for x in (torch.randn(3), torch.randn(3).as_subclass(Inherits)):
        out, expected = compiled(x), _as_subclass_identities(x)
        torch.testing.assert_close(out[0], expected[0])
        assert out[1:] == expected[1:]
    assert surge.counters["graph_breaks"] == 0 and surge.counters["fallbacks"] == 0
