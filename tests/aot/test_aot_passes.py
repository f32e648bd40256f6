"""DCE, CSE and constant folding on ATen graphs, and the pipeline that runs them."""
import torch
import torch.fx

from surge.passes.cleanup import ATEN_CLEANUP
from surge.passes.constant_fold import fold_constants
from surge.passes.cse import eliminate_common_subexpressions
from surge.passes.dce import eliminate_dead_code
from surge.passes.pipeline import PassContext, run_pipeline

aten = torch.ops.aten


def _graph(build):
    g = torch.fx.Graph()
    root = torch.nn.Module()
    build(g, root)
    return torch.fx.GraphModule(root, g)


def _count(gm, target):
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target is target)


def test_dce_removes_unused_pure_nodes_only():
    def build(g, root):
        x = g.placeholder("x")
        g.call_function(aten.exp.default, (x,))                 # dead
        r = g.call_function(aten.rand.default, ([3],))          # dead but random
        g.call_function(aten.copy_.default, (x, r))             # a copy-back: kept
        g.output((g.call_function(aten.neg.default, (x,)),))

    gm = eliminate_dead_code(_graph(build), keep_random=True)
    assert _count(gm, aten.exp.default) == 0
    assert _count(gm, aten.rand.default) == 1 and _count(gm, aten.copy_.default) == 1
    gm = eliminate_dead_code(_graph(build), keep_random=False)
    assert _count(gm, aten.rand.default) == 1  # still used by the copy-back


def test_cse_merges_pure_duplicates_but_not_random_ops():
    def build(g, root):
        x = g.placeholder("x")
        a = g.call_function(aten.mul.Tensor, (x, 2.0))
        b = g.call_function(aten.mul.Tensor, (x, 2.0))
        c = g.call_function(aten.mul.Tensor, (x, 2))            # int 2: a different op call
        r1 = g.call_function(aten.rand_like.default, (x,))
        r2 = g.call_function(aten.rand_like.default, (x,))
        g.output((a, b, c, r1, r2))

    gm = eliminate_common_subexpressions(_graph(build))
    assert _count(gm, aten.mul.Tensor) == 2
    assert _count(gm, aten.rand_like.default) == 2
    x = torch.randn(4)
    a, b, c, r1, r2 = gm(x)
    assert a is b and not torch.equal(r1, r2)


def test_constant_folding_folds_constants_but_not_state():
    def build(g, root):
        root.c = torch.arange(4.0)
        root.w = torch.nn.Parameter(torch.ones(4))
        x = g.placeholder("x")
        c = g.get_attr("c")
        c.meta["constant"] = True
        w = g.get_attr("w")                                      # live state: not folded
        folded = g.call_function(aten.mul.Tensor, (g.call_function(aten.exp.default, (c,)), 2))
        live = g.call_function(aten.mul.Tensor, (w, 3))
        g.output((g.call_function(aten.add.Tensor, (x, folded)), live))

    gm = fold_constants(_graph(build))
    gm = eliminate_dead_code(gm)
    assert _count(gm, aten.exp.default) == 0
    assert _count(gm, aten.mul.Tensor) == 1                     # only the one on the parameter
    x = torch.randn(4)
    out, live = gm(x)
    torch.testing.assert_close(out, x + torch.arange(4.0).exp() * 2)
    with torch.no_grad():
        gm.w.mul_(2)
    torch.testing.assert_close(gm(x)[1], torch.full((4,), 6.0))


def test_pipeline_has_named_steps_and_keeps_semantics():
    assert [s.name for s in ATEN_CLEANUP] == ["dce", "cse", "constant_fold", "dce_after_fold"]

    def build(g, root):
        x = g.placeholder("x")
        a = g.call_function(aten.sin.default, (x,))
        b = g.call_function(aten.sin.default, (x,))
        g.call_function(aten.cos.default, (x,))
        g.output((g.call_function(aten.add.Tensor, (a, b)),))

    gm = run_pipeline(_graph(build), PassContext(), ATEN_CLEANUP)
    assert _count(gm, aten.sin.default) == 1 and _count(gm, aten.cos.default) == 0
    x = torch.randn(5)
    torch.testing.assert_close(gm(x)[0], 2 * x.sin())


def test_a_changed_graph_regenerates_its_code_once_when_run_or_read(monkeypatch):
    """Passes mark the code stale instead of regenerating it after each edit; the next
    call or ``.code`` read sees the edited graph."""
    def build(g, root):
        x = g.placeholder("x")
        a = g.call_function(aten.mul.Tensor, (x, 2.0))
        b = g.call_function(aten.mul.Tensor, (x, 2.0))   # merged by CSE
        g.call_function(aten.exp.default, (x,))          # removed by DCE
        g.output((g.call_function(aten.add.Tensor, (a, b)),))

    gm = _graph(build)
    regenerated = []
    real = torch.fx.GraphModule.recompile
    monkeypatch.setattr(torch.fx.GraphModule, "recompile", lambda self: regenerated.append(1) or real(self))
    gm = eliminate_dead_code(eliminate_common_subexpressions(gm))
    assert regenerated == []
    assert "exp" not in gm.code and gm.code.count("aten.mul") == 1
    assert len(regenerated) == 1
    x = torch.randn(5)
    torch.testing.assert_close(gm(x), (4 * x,))
    assert len(regenerated) == 1, "the code read above is current: the call does not regenerate it"
    other = _graph(build)
    eliminate_dead_code(other)
    torch.testing.assert_close(other(x), (4 * x,))   # a call without a read regenerates too


def _factory(g, shape, value=0.0):
    node = g.call_function(aten.full.default, (list(shape), value), {"dtype": torch.float32})
    node.meta["val"] = torch.empty(shape, device="meta")
    return node


def test_slice_assignments_into_zeros_fold_but_cheap_factories_stay():
    """A mask built per call (zeros, slice assignments, a pairwise difference) is one stored
    constant where the graph reads it, of the largest size within the limit; a factory
    only a pointwise op reads stays an index expression."""
    def build(g, root):
        x = g.placeholder("x")
        mask = _factory(g, (8, 8))
        for k, (a, b) in enumerate([(0, 4), (4, 8)]):
            block = _factory(g, (4, 8), float(k + 1))
            mask = g.call_function(aten.slice_scatter.default, (mask, block, 0, a, b))
        labels = g.call_function(aten.view.default, (mask, [64]))
        pairs = g.call_function(aten.sub.Tensor, (g.call_function(aten.unsqueeze.default, (labels, 0)),
                                                  g.call_function(aten.unsqueeze.default, (labels, 1))))
        plus_one = g.call_function(aten.add.Tensor, (_factory(g, (64,)), 1))
        g.output((g.call_function(aten.add.Tensor, (x, pairs)), g.call_function(aten.mul.Tensor, (x, plus_one))))

    gm = eliminate_dead_code(fold_constants(_graph(build), max_numel=64))
    assert _count(gm, aten.slice_scatter.default) == 0
    assert _count(gm, aten.sub.Tensor) == 1               # [64, 64] is over the limit: computed from the labels
    assert _count(gm, aten.full.default) == 1             # the one read by an add only
    x = torch.randn(64, 64)
    labels = torch.cat([torch.full((32,), 1.0), torch.full((32,), 2.0)])
    pairs, scaled = gm(x)
    torch.testing.assert_close(pairs, x + (labels[None, :] - labels[:, None]))
    torch.testing.assert_close(scaled, x)
