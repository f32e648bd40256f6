"""Capture gaps found by running the model zoo against torch.compile, one cause each,
on tiny models: each must be one graph, no breaks, no recompile on a second call, and
eager's results (inference, and training steps under CPU bfloat16 autocast)."""
import copy

import pytest
import torch

import surge

import torchvision_style
from frontend_helpers import compile_strict


def _counts(before):
    return {k: surge.counters[k] - before.get(k, 0) for k in ("graphs", "graph_breaks", "fallbacks", "recompiles")}


ONE_GRAPH = {"graphs": 1, "graph_breaks": 0, "fallbacks": 0, "recompiles": 0}


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_torchvision_style_usage_logging_and_stochastic_depth_are_one_graph(training):
    # The usage probe reads ``fn.__class__.__name__`` of a plain function; that read was
    # a break in every block that calls stochastic depth (8 graphs, 11 breaks here).
    torch.manual_seed(0)
    model = torchvision_style.TinyEfficientNet().train(training)
    model.head[0].p = 0.0  # dropout off so that compiled and eager steps are comparable
    for m in model.modules():
        if isinstance(m, torchvision_style.DropRows):
            m.p = 0.0
    reference = copy.deepcopy(model)
    compiled, _ = compile_strict(model)
    before = dict(surge.counters)
    for seed in range(2):
        x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
        with torch.set_grad_enabled(training):
            out, expected = compiled(x), reference(x)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        if training:
            out.square().mean().backward()
            expected.square().mean().backward()
            for p, q in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4)
                p.grad = q.grad = None
    assert _counts(before) == ONE_GRAPH


def test_class_of_a_function_is_its_type():
    def probe(x, fn):
        return x + len(fn.__class__.__name__), fn.__class__ is type(fn)

    compiled, _ = compile_strict(probe)
    before = dict(surge.counters)
    x = torch.randn(3)
    out, same = compiled(x, torchvision_style.drop_rows)
    torch.testing.assert_close(out, x + len("function"))
    assert same is True
    assert _counts(before) == ONE_GRAPH


def _positions(ids, weight):
    # transformers' RoBERTa position ids: int casts balanced with type_as, then a lookup.
    mask = ids.ne(1).int()
    positions = (torch.cumsum(mask, dim=1).type_as(mask) + 0) * mask
    return (weight[positions.long() + 1] * 2).float().sum()


def test_type_as_inside_autocast_with_grad_is_captured():
    # type_as moves its tensor to the other's type (``_to_copy`` with a device): the
    # autocast metadata run made that a copy out of a meta tensor, a break per call.
    compiled, _ = compile_strict(_positions)
    before = dict(surge.counters)
    for seed in range(2):
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 4, (2, 8), generator=gen)
        weight = torch.randn(16, 4, generator=gen, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = compiled(ids, weight)
            expected = _positions(ids, weight)
        torch.testing.assert_close(loss, expected)
        (grad,) = torch.autograd.grad(loss, weight)
        (expected_grad,) = torch.autograd.grad(expected, weight)
        torch.testing.assert_close(grad, expected_grad)
    assert _counts(before) == ONE_GRAPH



def _offsets(x):
    return (x @ x.t() + x.new_tensor([1.0, 2.0, 3.0, 4.0])).float().sum()


def test_new_tensor_inside_autocast_is_captured():
    # new_tensor copies Python data to the reported device without dispatching on its
    # tensor: the metadata run got a real tensor back, which then met meta tensors.
    compiled, _ = compile_strict(_offsets)
    before = dict(surge.counters)
    for seed in range(2):
        x = torch.randn(4, 4, generator=torch.Generator().manual_seed(seed), requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, expected = compiled(x), _offsets(x)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(torch.autograd.grad(out, x)[0], torch.autograd.grad(expected, x)[0])
    assert _counts(before) == ONE_GRAPH


def test_id_of_none_is_a_guarded_constant():
    # torch.utils.checkpoint keys a dict by id(None); None is one object per process.
    def f(x, seen):
        return x + (1 if seen.get(id(None)) else 2)

    compiled, _ = compile_strict(f)
    before = dict(surge.counters)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, {id(None): True}), x + 1)
    torch.testing.assert_close(compiled(x, {}), x + 2)  # another dict: its keys are guarded
    counts = _counts(before)
    assert counts["graph_breaks"] == 0 and counts["fallbacks"] == 0
