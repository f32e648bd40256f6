"""Tracing to ATen and functionalization, checked against eager on fresh inputs."""
import operator

import pytest
import torch
import torch.fx

from surge.aot import TensorMeta, is_core, trace_aten
from surge.errors import Unsupported

from .helpers import assert_close_tree, call_targets, compile_aot, inplace_nodes

aten = torch.ops.aten


def check_contract(gm: torch.fx.GraphModule, *, mutated: int = 0):
    """Contract 2: ATen targets, meta on every node, in-place only as final copy-backs."""
    nodes = list(gm.graph.nodes)
    for n in nodes:
        if n.op in ("call_function", "placeholder", "get_attr"):
            assert "val" in n.meta, n.format_node()
        if n.op == "call_function" and n.target is not operator.getitem:
            assert isinstance(n.target, torch._ops.OpOverload), n.format_node()
            assert n.target.namespace == "aten", n.format_node()
            val = n.meta["val"]
            if isinstance(val, torch.Tensor):
                assert val.device.type == "meta"
                assert isinstance(n.meta["tensor_meta"], TensorMeta)
                assert n.meta["device"] == n.meta["tensor_meta"].device
    copies = inplace_nodes(gm)
    assert len(copies) == mutated
    assert all(c.target is aten.copy_.default and not c.users for c in copies)
    # copy-backs come last, right before the output
    tail = nodes[-1 - mutated:-1] if mutated else []
    assert set(tail) == set(copies)


def run_both(fn, *inputs):
    expected = fn(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    gm = torch.fx.symbolic_trace(fn)
    aten_gm = trace_aten(gm, inputs)
    actual_flat = aten_gm(*inputs)
    return aten_gm, actual_flat, expected


def test_pointwise_and_reduction_graph_matches_eager():
    def f(x, y):
        return torch.nn.functional.gelu(x @ y + 1.5).sum(dim=1), torch.softmax(x, -1)

    x, y = torch.randn(4, 5), torch.randn(5, 5)
    gm, actual, expected = run_both(f, x, y)
    assert_close_tree(tuple(actual), expected)
    check_contract(gm)
    targets = call_targets(gm)
    # gelu and softmax are decomposed to core ops
    assert aten.gelu.default not in targets and aten._softmax.default not in targets
    assert aten.erf.default in targets and aten.amax.default in targets
    assert all(is_core(t) for t in targets if t is not operator.getitem)


def test_no_real_compute_while_tracing():
    seen = []

    def spy(x):
        seen.append((type(x).__name__, x.device))
        return (x * 2).exp()

    g = torch.fx.Graph()
    g.output(g.call_function(spy, (g.placeholder("x"),)))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    x = torch.randn(3)
    aten_gm = trace_aten(gm, [x])
    # the torch-level code ran once, on a tracer tensor carrying the real device
    assert seen == [("TracerTensor", torch.device("cpu"))]
    torch.testing.assert_close(aten_gm(x)[0], spy(x))


def test_inplace_on_intermediate_and_views():
    def f(x):
        y = x * 1.0
        y[0].mul_(3)          # write through a select view
        z = y.t()
        z[:, 1].add_(10)      # write through a permute + select
        y.relu_()
        return y, z.sum()

    x = torch.randn(3, 4)
    gm, actual, expected = run_both(f, x)
    assert_close_tree(tuple(actual), expected)
    check_contract(gm)


def test_input_mutation_becomes_one_copy_back():
    def f(x, buf):
        buf.add_(1)
        buf[0].zero_()
        x.mul_(2)
        return x + buf

    x, buf = torch.randn(3, 3), torch.randn(3, 3)
    x_ref, buf_ref = x.clone(), buf.clone()
    expected = f(x_ref, buf_ref)
    gm = trace_aten(torch.fx.symbolic_trace(f), [x.clone(), buf.clone()])
    check_contract(gm, mutated=2)
    out = gm(x, buf)[0]
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, x_ref)
    torch.testing.assert_close(buf, buf_ref)


def test_out_forms_scalars_and_factories():
    def f(x):
        out = torch.empty_like(x)
        torch.add(x, 2.5, out=out)
        z = torch.zeros_like(x) + torch.arange(4.0) + torch.ones(3, 1, dtype=torch.float64)
        return out * x.shape[0], z, torch.full((2,), 7)

    x = torch.randn(3, 4)
    gm, actual, expected = run_both(f, x)
    assert_close_tree(tuple(actual), expected)
    check_contract(gm)


def test_no_grad_and_autocast_regions():
    def f(x, w):
        with torch.no_grad():
            a = x * 2
        with torch.autocast("cpu", dtype=torch.bfloat16):
            b = x @ w
        return a, b, b.dtype

    gm = torch.fx.GraphModule(torch.nn.Module(), _graph_with_regions())
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    expected = f(x, w)
    compiled = compile_aot(gm, [x, w])
    a, b = compiled(x, w)
    assert b.dtype == torch.bfloat16
    torch.testing.assert_close(a, expected[0])
    torch.testing.assert_close(b, expected[1])


def _graph_with_regions():
    # What the frontend records for `with torch.no_grad()` and `with torch.autocast(...)`.
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    g.call_function(torch._C._set_grad_enabled, (False,))
    a = g.call_function(operator.mul, (x, 2))
    g.call_function(torch._C._set_grad_enabled, (True,))
    ctx = g.call_function(torch.amp.autocast_mode._enter_autocast, ("cpu", torch.bfloat16, True, None))
    b = g.call_function(operator.matmul, (x, w))
    g.call_function(torch.amp.autocast_mode._exit_autocast, (ctx,))
    g.output((a, b))
    return g


def test_output_aliasing_matches_eager():
    def f(x):
        y = x + 1
        return x.t(), x, y[0], y[1], y.view(-1)

    x = torch.randn(2, 3)
    compiled = compile_aot(f, [x])
    xt, same, y0, y1, yflat = compiled(x)
    assert same is x                             # returning an input returns that input
    assert xt._base is x or xt.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    # outputs viewing one intermediate share its storage, as in eager
    assert y0.untyped_storage().data_ptr() == yflat.untyped_storage().data_ptr()
    yflat.zero_()
    assert y0.abs().sum() == 0 and y1.abs().sum() == 0
    torch.testing.assert_close(xt, x.t())


def test_output_view_of_mutated_input_sees_new_values():
    def f(x):
        x.add_(1)
        return x[1:]

    x = torch.randn(4)
    ref = x.clone()
    compiled = compile_aot(f, [x.clone()])
    out = compiled(x)
    torch.testing.assert_close(out, ref[1:] + 1)
    out.zero_()
    assert (x[1:] == 0).all()


def test_parameters_are_lifted_and_buffers_updated():
    bn = torch.nn.BatchNorm1d(4)
    bn_ref = torch.nn.BatchNorm1d(4)
    bn_ref.load_state_dict(bn.state_dict())
    x = torch.randn(8, 4)
    record = {}
    with torch.no_grad():
        compiled = compile_aot(torch.nn.Sequential(bn), [x], record=record)
        out = compiled(x)
        ref = bn_ref(x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean)
    torch.testing.assert_close(bn.running_var, bn_ref.running_var)
    assert bn.num_batches_tracked.item() == 1
    (graph,) = record["graphs"]
    check_contract(graph, mutated=3)


def test_data_dependent_op_raises_clear_error():
    def f(x):
        return x.nonzero()

    with pytest.raises(Unsupported, match="nonzero"):
        trace_aten(torch.fx.symbolic_trace(f), [torch.randn(3)])


def test_meta_val_keeps_real_device_and_strides():
    def f(x):
        return x.t().contiguous() * 2

    x = torch.randn(3, 5)
    gm = trace_aten(torch.fx.symbolic_trace(f), [x])
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0][0]
    assert out.meta["tensor_meta"].shape == (5, 3)
    assert out.meta["tensor_meta"].stride == (3, 1)
    assert out.meta["device"] == torch.device("cpu")


def test_trace_without_decompositions_keeps_ops():
    def f(x):
        return torch.nn.functional.gelu(x)

    gm = trace_aten(torch.fx.symbolic_trace(f), [torch.randn(3)], decompose=False)
    assert aten.gelu.default in call_targets(gm)


def test_views_of_views_and_metadata_mutations():
    def f(x, y):
        a = x[1:]
        b = a.t()
        b[0].fill_(5)              # through slice + transpose + select into an input
        c = x.view(-1)             # an alias made after the write sees it
        x.mul_(2)
        d = y.unsqueeze(0)
        d.squeeze_(0)              # metadata change of a view of an input
        e = y * 1
        e.unsqueeze_(1)            # metadata changes of a tensor made in the graph
        e.transpose_(0, 1)
        e[0, 1:].zero_()
        parts = e.split(2, dim=1)
        parts[1].add_(100)         # through a multi-output view
        return a.sum(), c.clone(), b, e, parts[0], d

    x, y = torch.randn(4, 4), torch.randn(5)
    x_eager, x_compiled = x.clone(), x.clone()
    expected = f(x_eager, y)
    compiled = compile_aot(f, [x.clone(), y])
    actual = compiled(x_compiled, y)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
        assert a.stride() == e.stride()
    torch.testing.assert_close(x_compiled, x_eager)
    assert actual[2]._base is x_compiled and actual[5]._base is y


def test_metadata_mutation_of_an_input_is_refused():
    def f(x):
        x.unsqueeze_(0)
        return x + 1

    with pytest.raises(Unsupported, match="graph input"):
        trace_aten(torch.fx.symbolic_trace(f), [torch.randn(3)])
