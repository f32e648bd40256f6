"""Modules and objects built inside the compiled frame, as models build them per call
(a loss module in a model's head, a softmax module, a chain of iterables, a custom
autograd Function): captured without a graph break, and never guarded on the identity
of an object the frame made (that guard fails on every call: a recompile each time)."""
import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import surge

from frontend_helpers import compile_strict, same


def _counts(before):
    return {k: surge.counters[k] - before.get(k, 0) for k in ("graphs", "graph_breaks", "fallbacks", "recompiles")}


def _check(fn, make_inputs, *, graphs=1, breaks=0, calls=3, grads=False):
    """``fn`` compiled matches eager on fresh inputs, call after call, with the given
    structure and no recompile."""
    compiled, recorder = compile_strict(fn)
    before = dict(surge.counters)
    for _ in range(calls):
        inputs = make_inputs()
        out = compiled(*inputs)
        ref_inputs = [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
                      for x in inputs]
        ref = fn(*ref_inputs)
        same(out, ref)
        if grads:
            out.sum().backward()
            ref.sum().backward()
            for a, b in zip(inputs, ref_inputs):
                if isinstance(a, torch.Tensor) and a.requires_grad:
                    torch.testing.assert_close(a.grad, b.grad)
    assert _counts(before) == {"graphs": graphs, "graph_breaks": breaks, "fallbacks": 0, "recompiles": 0}
    return recorder


class ClassificationHead(nn.Module):
    """A transformers-style head: the loss module is made on each call."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)

    def forward(self, x, labels):
        logits = self.proj(x)
        loss_fct = nn.CrossEntropyLoss()
        return loss_fct(logits.view(-1, 3), labels.view(-1))


def test_loss_module_built_in_forward_is_one_graph_without_recompiles():
    torch.manual_seed(0)
    head = ClassificationHead()
    compiled, recorder = compile_strict(head)
    before = dict(surge.counters)
    for _ in range(3):
        x, labels = torch.randn(2, 4), torch.randint(0, 3, (2,))
        loss = compiled(x, labels)
        loss.backward()
        grads = [p.grad.clone() for p in head.parameters()]
        head.zero_grad(set_to_none=True)
        ref = head(x, labels)
        ref.backward()
        torch.testing.assert_close(loss, ref)
        for g, p in zip(grads, head.parameters()):
            torch.testing.assert_close(g, p.grad)
        head.zero_grad(set_to_none=True)
    assert _counts(before) == {"graphs": 1, "graph_breaks": 0, "fallbacks": 0, "recompiles": 0}
    assert "cross_entropy" in recorder.ops()


def test_library_modules_built_in_the_frame():
    def f(x):
        weights = nn.Softmax(dim=-1)(x)
        kept = nn.Dropout(p=0.0)(x)  # a fresh module is in training mode, as in eager
        return weights * kept + nn.ReLU()(x) + nn.Identity()(x)

    _check(f, lambda: (torch.randn(2, 5, requires_grad=True),), grads=True)


def test_bad_constructor_argument_raises_as_eager_does():
    def f(x):
        return nn.Dropout(p=1.5)(x)

    with pytest.raises(ValueError, match="dropout probability"):
        f(torch.randn(3))
    with pytest.raises(ValueError, match="dropout probability"):
        surge.compile(f, backend="eager")(torch.randn(3))


class Scale(nn.Module):
    def __init__(self, factor, dim=-1):
        super().__init__()
        self.factor = factor
        self.norm = nn.Softmax(dim=dim)  # a submodule, sorted into _modules

    def forward(self, x):
        return self.norm(x) * self.factor


class NoInit(nn.Module):
    def forward(self, x):
        return x + 1 if self.training else x - 1


def test_user_modules_built_in_the_frame():
    def f(x):
        return Scale(3.0)(x) + NoInit()(x)

    recorder = _check(f, lambda: (torch.randn(2, 4),))
    assert recorder.ops().count("softmax") == 1


def test_module_built_in_the_frame_and_returned_is_a_real_module():
    def f(x):
        m = Scale(2.0, dim=0)
        return m(x), m

    compiled, _ = compile_strict(f)
    x = torch.randn(3, 2)
    out, m = compiled(x)
    ref, ref_m = f(x)
    torch.testing.assert_close(out, ref)
    assert type(m) is Scale and m is not compiled(x)[1]
    assert m.factor == 2.0 and isinstance(m.norm, nn.Softmax) and m.norm.dim == 0
    assert dict(m.named_modules()).keys() == dict(ref_m.named_modules()).keys()
    torch.testing.assert_close(m(x), ref_m(x))


def test_module_built_in_the_frame_and_live_across_a_graph_break_does_not_recompile():
    def f(x):
        act = nn.Softmax(dim=-1)
        surge.graph_break()
        return act(x) * 2

    _check(f, lambda: (torch.randn(2, 3),), graphs=1, breaks=1)  # nothing to capture before the break


class BreakingInit(nn.Module):
    """Its construction runs in CPython (a graph break inside __init__): the resume
    function gets a fresh module on every call."""

    def __init__(self):
        super().__init__()
        surge.graph_break()
        self.dim = 1

    def forward(self, x):
        return x.softmax(self.dim)


def test_module_made_by_cpython_at_a_break_is_guarded_by_type_not_identity():
    def f(x):
        m = BreakingInit()
        return m(x) + 1

    compiled, _ = compile_strict(f)
    before = dict(surge.counters)
    for _ in range(4):
        x = torch.randn(2, 3)
        torch.testing.assert_close(compiled(x), f(x))
    assert surge.counters["recompiles"] == before.get("recompiles", 0)


def test_attribute_of_a_fresh_module_at_a_break_is_guarded_by_value():
    """The resume function reads ``m.dim`` of a module that CPython made: a guard on its
    value (not on the module's identity) must notice when it differs."""
    class Picked(nn.Module):
        def __init__(self, dim):
            super().__init__()
            surge.graph_break()
            self.dim = dim

        def forward(self, x):
            return x.softmax(self.dim)

    def f(x, dim):
        return Picked(dim)(x)

    compiled, _ = compile_strict(f)
    x = torch.randn(2, 3)
    for dim in (0, 1, 0, 1):
        torch.testing.assert_close(compiled(x, dim), f(x, dim))


def test_containers_and_modes_of_modules_built_in_the_frame():
    def f(x):
        drop = nn.Dropout(0.5)
        drop.eval()  # deterministic: eval() reached the module's state
        block = nn.Sequential(nn.Tanh(), drop).train(False)
        return block(x), drop.training, block.training

    _check(f, lambda: (torch.randn(2, 4),))


class RebuildsItsActivation(nn.Module):
    def forward(self, x):
        self.act = nn.GELU()  # registered on the real module, as eager does
        return self.act(x)


def test_module_built_in_the_frame_and_stored_on_an_input_module():
    model = RebuildsItsActivation()
    _check(model, lambda: (torch.randn(3),))
    assert isinstance(model._modules["act"], nn.GELU) and "act" not in model.__dict__


def test_registering_a_taken_name_raises_as_eager_does():
    def f(x):
        m = nn.Module()
        m.k = 1
        m.register_buffer("k", None)
        return x

    with pytest.raises(KeyError, match="already exists"):
        f(torch.randn(2))
    with pytest.raises(KeyError, match="already exists"):
        surge.compile(f, backend="eager")(torch.randn(2))


def test_modules_with_parameters_built_in_the_frame_run_eagerly_there():
    """Fresh random weights on each call: not captured, but the call still works."""
    def f(x):
        return nn.Linear(4, 2)(x).shape

    compiled = surge.compile(f, backend="eager")
    assert compiled(torch.randn(3, 4)) == torch.Size([3, 2])
    assert surge.counters["graph_breaks"] >= 1


# ---- plain objects -----------------------------------------------------------------

class Affine:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __call__(self, x):
        return x * self.a + self.b


def test_plain_object_built_and_called_in_the_frame():
    def f(x):
        return Affine(2.0, 1.0)(x)

    _check(f, lambda: (torch.randn(3),))


def test_itertools_chain_in_the_frame():
    def f(x, y):
        total = x * 0
        for v in itertools.chain([x, y], (x * 2,)):
            total = total + v
        return total, list(itertools.chain([1], [2, 3]))

    _check(f, lambda: (torch.randn(3), torch.randn(3)))


class ScaledSquare(torch.autograd.Function):
    """Its backward is deliberately not the forward's derivative: the compiled code
    must run it, not differentiate the forward's ops."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 0.5 * x * ctx.scale, None


def _square_then_add(x):
    return ScaledSquare.apply(x.sin(), 3.0) + 1


def test_autograd_function_apply_in_the_frame():
    recorder = _check(_square_then_add, lambda: (torch.randn(4, requires_grad=True),), grads=True)
    assert recorder.ops() == ["sin", "ScaledSquare_apply", "add"]


def test_autograd_function_apply_through_the_aot_layer():
    compiled = surge.compile(_square_then_add, backend="aot_eager")
    x = torch.randn(4, requires_grad=True)
    compiled(x).sum().backward()
    grad, x.grad = x.grad, None
    _square_then_add(x).sum().backward()
    torch.testing.assert_close(grad, x.grad)
    assert surge.counters["graphs"] == 1 and surge.counters["graph_breaks"] == 0


# ---- library patterns: a table keyed by types, objects with __slots__ ----------------

def _check_int(v):
    return v * 2


def _check_str(v):
    return len(v)


def _negate(v):
    return -v


CHECKS = {int: _check_int, str: _check_str, "default": _check_int}


class Slotted:
    __slots__ = ("name", "scale")

    def __init__(self, name, scale):
        self.name, self.scale = name, scale


def test_dict_keyed_by_classes_and_slot_attributes():
    def f(x, field, value):
        check = CHECKS.get(type(value)) or CHECKS["default"]
        return x * field.scale * check(value), field.name

    compiled, recorder = compile_strict(f)
    x = torch.randn(3)
    for field, value in [(Slotted("a", 2.0), 3), (Slotted("b", 2.0), "abc"), (Slotted("a", 5.0), 3)]:
        same(compiled(x, field, value), f(x, field, value))
    CHECKS[int] = _negate  # the table's values are guarded too
    try:
        same(compiled(x, Slotted("a", 2.0), 7), f(x, Slotted("a", 2.0), 7))
    finally:
        CHECKS[int] = _check_int
    assert surge.counters["graph_breaks"] == 0 and surge.counters["fallbacks"] == 0
