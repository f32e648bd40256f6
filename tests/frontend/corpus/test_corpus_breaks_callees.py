"""Graph breaks inside called functions, methods and submodules.

The caller's graph runs up to the call, the call goes through surge (the callee is
captured on its own, split at its own break and resumed there), and the caller
resumes after it. Each program is compared with eager on fresh inputs (results,
arguments afterwards, printed output in order) with the number of graphs and graph
breaks over two calls; ``(3.11 counts, 3.12 counts)`` where the versions differ.
"""
import functools

import pytest
import torch
import torch.nn as nn

import surge
from breaks_corpus import expected_counts, mat, mat_grad
from corpus_harness import RecordingBackend, check_gradients_and_step, check_graph_breaks, run_printing

EVENTS: list = []


# ---- functions ------------------------------------------------------------------------


def _g(x):
    a = x.sin()
    print(a.shape)
    return a.cos()


def brief_example(x):
    y = _g(x) * 2
    return y


def _two_breaks(t):
    t = t + 1
    print("one")
    t = t * 2
    surge.graph_break()
    return t - 1


def callee_with_two_breaks(x):
    return _two_breaks(x.relu()) / 2


def _level3(t):
    print("level 3")
    return t * 3


def _level2(t):
    return _level3(t + 2) - 2


def _level1(t):
    return _level2(t.exp()) * 1.5


def three_levels_of_calls(x):
    return _level1(x) + x


def _item_scale(t):
    return t * (t.abs().max().item() > -1)


def callee_reads_item(x):
    return _item_scale(x + 1).sum(0)


def _branch_on_tensor(t):
    if t.sum() > 0:
        return t * 2
    return t * -2


def callee_branches_on_tensor(x):
    return _branch_on_tensor(x - 0.5) + 1


def _kw_callee(t, *, scale=1.0, shift=0.0):
    print("kw", scale)
    return t * scale + shift


def callee_with_keywords(x):
    return _kw_callee(x, scale=3.0, shift=1.0).tanh()


def _star_callee(*ts, **opts):
    print("star", len(ts), sorted(opts))
    return sum(ts) * opts["k"]


def callee_with_star_args(x):
    parts = (x, x * 2)
    return _star_callee(*parts, k=4, tag="t") - 1


def _returns_pair(t):
    surge.graph_break()
    return t.sin(), t.cos()


def callee_returns_tuple(x):
    s, c = _returns_pair(x * 3)
    return s * s + c * c


def _appends(t, log):
    log.append("before")
    print(len(log))
    log.append("after")
    return t + len(log)


def callee_mutates_list_argument(x, log):
    return _appends(x * 2, log), len(log)


COUNT = [0]


def _bumps_global(t):
    COUNT[0] += 1
    print("count", COUNT[0] > 0)
    return t * 2


def callee_mutates_global_list(x):
    return _bumps_global(x) + 1


def _make_scaler(k):
    def scaler(t):
        print("scaler", k)
        return t * k
    return scaler


_scale_by_5 = _make_scaler(5.0)


def callee_is_a_closure(x):
    return _scale_by_5(x.abs()) + 1


def callee_is_a_local_lambda(x):
    f = lambda t: (surge.graph_break(), t * 4)[1]  # noqa: E731
    return f(x) + f(x + 1)


def callee_made_by_local_def(x):
    bias = x.mean()

    def shifted(t):
        print("shifted")
        return t - bias
    return shifted(x * 2) * 3


def _calls_twice(t):
    return _g(t) + _g(t * 2)


def callee_calls_breaking_callee_twice(x):
    return _calls_twice(x) * 0.5


def callee_in_loop(x):
    for _ in range(3):
        x = _g(x) + 0.1
    return x


def callee_in_condition(x, flag):
    if flag:
        x = _g(x)
    return x * 2


def _no_break(t):
    return t.sigmoid() * 2


def only_one_of_two_callees_breaks(x):
    return _no_break(x) + _g(x)


def _partial_target(t, k):
    print("partial", k)
    return t * k


_partial_7 = functools.partial(_partial_target, k=7.0)


def functools_partial_callee(x):
    return _partial_7(x + 1) - 1


def _recursive(t, n):
    if n == 0:
        print("base")
        return t
    return _recursive(t * 2, n - 1) + 1


def recursive_callee_with_break_at_the_base(x):
    return _recursive(x, 2)


def _default_from_global(t, k=COUNT):
    print("defaults", len(k))
    return t * len(k)


def callee_with_default_argument(x):
    return _default_from_global(x) + 2


@torch.no_grad()
def _no_grad_helper(t):
    u = t * 2
    print("no_grad helper", torch.is_grad_enabled())
    return u + 1


def no_grad_decorated_callee(x):
    y = _no_grad_helper(x)
    return y * x, y.requires_grad


@torch.enable_grad()
def _enable_grad_helper(t):
    u = t * 3
    surge.graph_break()
    return u, u.requires_grad


def enable_grad_decorated_callee_under_no_grad(x):
    with torch.no_grad():
        u, flag = _enable_grad_helper(x)
    return u + 1, flag


no_grad_decorated_root = torch.no_grad()(_g)


# ---- methods ----------------------------------------------------------------------


class Helper:
    def __init__(self, k):
        self.k = k

    def apply(self, t):
        print("apply", self.k)
        return t * self.k

    @staticmethod
    def static(t):
        surge.graph_break()
        return t + 100

    @classmethod
    def from_class(cls, t):
        print("classmethod", cls.__name__)
        return t - 100


HELPER = Helper(3.0)


def bound_method_callee(x):
    return HELPER.apply(x.sin()) + 1


def staticmethod_callee(x):
    return Helper.static(x) * 2


def classmethod_callee(x):
    return Helper.from_class(x) * 2


def method_of_object_made_in_function(x):
    h = Helper(2.0)
    return h.apply(x) + h.k


# ---- modules ----------------------------------------------------------------------


class PrintingBlock(nn.Module):
    def __init__(self, width=4):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        h = self.lin(x)
        print("block")
        return h.relu()


class Residual(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) + x


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Residual(Residual(PrintingBlock()))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.body(x * 2))


class Tower(nn.Module):
    def __init__(self, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList(PrintingBlock() for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x) + x
        return x.sum(-1)


class ItemGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if h.mean().item() > 100:
            return h * 0
        return h


class GatedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = ItemGate()
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        return self.out(self.gate(x).tanh())


class SequentialWithBreak(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), PrintingBlock(), nn.Linear(4, 2))

    def forward(self, x):
        return self.seq(x) * 2


class InstanceForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.forward = self.forward_with_print

    def forward_with_print(self, x):
        print("instance forward")
        return self.lin(x)


class CallsInstanceForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = InstanceForward()

    def forward(self, x):
        return self.inner(x) + 1


class PreHooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = PrintingBlock()
        self.block.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
        self.block.register_forward_hook(lambda module, args, out: out + 1)

    def forward(self, x):
        return self.block(x) - x


class BackwardHooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.register_full_backward_hook(lambda module, gin, gout: EVENTS.append("backward hook"))

    def forward(self, x):
        return self.lin(x * 2).relu()


class NoGradMethodModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @torch.no_grad()
    def stats(self, x):
        m = self.lin(x).mean()
        print("stats")
        return m

    def forward(self, x):
        return self.lin(x) * self.stats(x)


def brief_example_counts():
    # f's prefix has no ops; g: sin | print | cos; f resumes: * 2.
    return 3, 2


PROGRAMS = {
    # program: (make_args, (graphs, breaks) over two calls [, 3.12 counts])
    brief_example: (mat, (3, 2)),
    callee_with_two_breaks: (mat, (5, 3)),     # relu | t + 1 | t * 2 | t - 1 | / 2
    three_levels_of_calls: (mat, (6, 4)),      # each level breaks at its call; level 3 at its print
    callee_reads_item: (mat, (5, 2)),
    callee_branches_on_tensor: (lambda i: (torch.rand(3, 4) + (1 if i == 0 else -2),), (5, 2)),
    callee_with_keywords: (mat, (2, 2)),
    callee_with_star_args: (mat, (3, 2)),
    callee_returns_tuple: (mat, (3, 2)),
    callee_mutates_list_argument: (lambda i: (torch.randn(3), ["start"]), (2, 2)),
    callee_mutates_global_list: (mat, (2, 3)),
    callee_is_a_closure: (mat, (3, 2)),
    callee_is_a_local_lambda: (mat, (3, 3)),
    callee_made_by_local_def: (mat, (3, 2)),
    callee_calls_breaking_callee_twice: (mat, (5, 4)),
    callee_in_loop: (mat, (3, 3)),             # every iteration runs the same resume functions
    callee_in_condition: (lambda i: (torch.randn(3), i == 0), (4, 2)),
    only_one_of_two_callees_breaks: (mat, (4, 2)),
    functools_partial_callee: (mat, (3, 2)),   # the partial's function runs compiled, split at its print
    # Each depth (a different constant n) is its own entry of the one code object.
    recursive_callee_with_break_at_the_base: (mat, (3, 4)),
    callee_with_default_argument: (mat, (2, 2)),
    no_grad_decorated_callee: (mat_grad, (3, 2)),
    enable_grad_decorated_callee_under_no_grad: (mat_grad, (2, 2)),
    no_grad_decorated_root: (mat_grad, (2, 1)),
    bound_method_callee: (mat, (3, 2)),
    staticmethod_callee: (mat, (2, 2)),
    classmethod_callee: (mat, (2, 2)),
    method_of_object_made_in_function: (mat, (2, 2)),
}


@pytest.mark.parametrize("program", list(PROGRAMS), ids=[p.__name__ for p in PROGRAMS])
def test_break_inside_a_callee(program):
    make_args, *counts = PROGRAMS[program]
    graphs, breaks = expected_counts(*counts)
    check_graph_breaks(program, make_args, graphs=graphs, breaks=breaks)


MODULES = {
    # module class: (graphs, breaks) over two calls
    Outer: (5, 4),                 # x * 2 | each Residual and the block break at their calls
    Tower: (4, 3),                 # three alike blocks, each split at its print, share entries; so do the iterations
    GatedNet: (2, 2),              # gate's linear | .item() | tanh, out (the item's resume has no ops)
    SequentialWithBreak: (5, 3),   # nn.Sequential's own forward runs compiled, split at the block
    CallsInstanceForward: (2, 2),
    PreHooked: (3, 2),             # the hooks run around the block's compiled forward
    NoGradMethodModule: (3, 2),    # a @torch.no_grad() method breaks inside its context
}


@pytest.mark.parametrize("cls", list(MODULES), ids=[c.__name__ for c in MODULES])
def test_break_inside_a_submodule(cls):
    torch.manual_seed(0)
    module = cls()
    graphs, breaks = MODULES[cls]
    compiled = check_graph_breaks(module, mat_grad, graphs=graphs, breaks=breaks)
    # Gradients through the split graphs equal eager's; a step through the compiled
    # module updates the shared parameters.
    compiled = surge.compile(module, backend=RecordingBackend())
    params = [p for p in module.parameters() if p.requires_grad]
    run_printing(lambda: check_gradients_and_step(compiled, module, params, mat_grad(2), None, None))


def test_submodule_breaks_print_in_eager_order_and_train():
    torch.manual_seed(0)
    module = Tower()
    compiled = surge.compile(module, backend=RecordingBackend())
    x = torch.randn(3, 4, requires_grad=True)
    expected, eager_printed = run_printing(lambda: module(x))
    actual, printed = run_printing(lambda: compiled(x))
    assert printed == eager_printed == "block\n" * 3
    torch.testing.assert_close(actual, expected)
    grads = torch.autograd.grad(actual.sum(), [x, *module.parameters()])
    eager_grads = torch.autograd.grad(module(x).sum(), [x, *module.parameters()])
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e)


def test_backward_hooks_of_a_submodule_fire_as_in_eager():
    torch.manual_seed(0)
    module = BackwardHooked()
    compiled = surge.compile(module, backend=RecordingBackend())
    x = torch.randn(3, 4, requires_grad=True)
    EVENTS.clear()
    module(x).sum().backward()
    eager_events, eager_grad = list(EVENTS), x.grad.clone()
    EVENTS.clear()
    x.grad = None
    compiled(x).sum().backward()
    assert EVENTS == eager_events == ["backward hook"]
    torch.testing.assert_close(x.grad, eager_grad)
    # The hooked linear runs in torch's own __call__: one break at its call.
    assert surge.counters["graph_breaks"] == 1 and surge.counters["fallbacks"] == 0


def test_brief_example_in_explain():
    report = surge.explain(brief_example)(torch.randn(3))
    graphs, breaks = brief_example_counts()
    assert report.graph_count == graphs and report.graph_break_count == breaks
    text = str(report)
    # Both breaks name g's print line; the caller's names its own call line too.
    assert text.count("print(a.shape)") >= 2
    assert "brief_example breaks at its call at test_corpus_breaks_callees.py:" in text


def test_callee_stand_in_is_cached_and_guards_stay_exact():
    backend = RecordingBackend()
    compiled = surge.compile(brief_example, backend=backend)
    for _ in range(3):
        x = torch.randn(3)
        _, printed = run_printing(lambda: compiled(x))
    assert len(backend.graphs) == 3
    # A new shape fails the guards of the caller, the callee and both resume functions.
    run_printing(lambda: compiled(torch.randn(2, 5)))
    assert len(backend.graphs) == 6 and surge.counters["recompiles"] == 4


def test_fullgraph_names_the_callee_line():
    compiled = surge.compile(brief_example, fullgraph=True, backend=RecordingBackend())
    with pytest.raises(surge.errors.Unsupported) as info:
        compiled(torch.randn(3))
    assert "print(a.shape)" in str(info.value)
