"""torch.cond: a tensor predicate makes both branches subgraphs and one
``torch.ops.higher_order.cond`` node (as TorchDynamo emits it); a Python predicate
inlines the branch it picks. Compared with eager on fresh inputs and with
torch.compile's graph count on the same program."""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import surge
from frontend_helpers import compile_strict

COND = torch.ops.higher_order.cond


def torch_compile_graphs(fn, *args) -> int:
    counter = torch._dynamo.testing.CompileCounter()
    torch._dynamo.reset()
    torch.compile(fn, backend=counter)(*args)
    return counter.frame_count


def check(fn, make_args, calls=4, backend=None, **kwargs):
    compiled, rec = compile_strict(fn, **kwargs) if backend is None else (
        surge.compile(fn, backend=backend, options={"raise_internal_errors": True}, **kwargs), None)
    for i in range(calls):
        torch.manual_seed(i)
        args = make_args()
        torch.testing.assert_close(compiled(*args), fn(*args))
    return rec


def cond_nodes(gm):
    return [n for n in gm.graph.nodes if n.target is COND]


def test_tensor_predicate_makes_one_graph_with_a_cond_node_and_both_paths_run():
    def f(x, y):
        def t(a):
            return a.sin() + y      # y is lifted into both branches
        def e(a):
            return a.cos() * 2
        return torch.cond(x.sum() > 0, t, e, (x,)) + 1

    # Seeds give both signs of x.sum(): both branches are taken across the calls.
    rec = check(f, lambda: (torch.randn(5), torch.randn(5)), calls=6, fullgraph=True)
    assert len(rec.graphs) == 1 == torch_compile_graphs(f, torch.randn(5), torch.randn(5))
    (node,) = cond_nodes(rec.graphs[0])
    branches = [getattr(rec.graphs[0], a.target) for a in node.args[1:3]]
    for gm in branches:
        assert len([n for n in gm.graph.nodes if n.op == "placeholder"]) == 2
    assert surge.counters["graph_breaks"] == 0


def test_python_predicate_inlines_the_chosen_branch():
    def f(x, flag: bool):
        return torch.cond(flag, lambda a: a + 1, lambda a: a - 1, (x,))

    rec = check(f, lambda: (torch.randn(3), True), fullgraph=True)
    assert not cond_nodes(rec.graphs[0])
    torch.testing.assert_close(compile_strict(f)[0](torch.ones(2), False), torch.zeros(2))


def test_tuple_outputs_module_parameters_and_nested_cond():
    lin = torch.nn.Linear(4, 4)

    def f(x):
        def inner_t(a):
            return a * 3
        def inner_f(a):
            return a / 3
        def t(a):
            return lin(a), torch.cond(a.mean() > 0, inner_t, inner_f, (a,))
        def e(a):
            return a.relu(), a.tanh()
        out = torch.cond(x[0, 0] > 0, t, e, [x])
        return out[0] + out[1]

    rec = check(f, lambda: (torch.randn(2, 4),), calls=6, fullgraph=True)
    assert len(rec.graphs) == 1


def test_branch_with_a_side_effect_is_a_graph_break_where_eager_torch_cond_runs():
    seen = []

    def f(x):
        def t(a):
            seen.append(1)
            return a + 1
        return torch.cond(x.sum() > 0, t, lambda a: a - 1, (x,)) * 2

    compiled = surge.compile(f, backend="eager")
    x = torch.ones(3)
    with pytest.raises(Exception) as eager_error:
        f(x)
    with pytest.raises(type(eager_error.value)):  # torch.cond's own error, from CPython
        compiled(x)
    with pytest.raises(surge.errors.Unsupported, match="side effects"):
        surge.compile(f, backend="eager", fullgraph=True)(x)


def test_branches_returning_different_shapes_run_as_eager_torch_cond():
    def f(x):
        return torch.cond(x.sum() > 0, lambda a: a[:1] + 1, lambda a: a - 1, (x,))

    compiled = surge.compile(f, backend="eager")
    for x in (torch.ones(3), -torch.ones(3)):
        torch.testing.assert_close(compiled(x), f(x))


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "default"])
def test_backends_run_the_cond_node(backend):
    def f(x, y):
        return torch.cond(x.max() > 0.5, lambda a, b: (a * b).exp(), lambda a, b: a - b, (x, y))

    check(f, lambda: (torch.rand(6), torch.randn(6)), calls=6, backend=backend, fullgraph=True)


def test_subclass_operand_raises_as_eager_torch_cond_does():
    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs or {})

    def f(x):
        return torch.cond(x.sum() > 0, lambda a: a + 1, lambda a: a - 1, (x,))

    x = torch.randn(3).as_subclass(Logged)
    with pytest.raises(Exception) as eager_error:
        f(x)
    with pytest.raises(type(eager_error.value)):
        surge.compile(f, backend="eager")(x)
