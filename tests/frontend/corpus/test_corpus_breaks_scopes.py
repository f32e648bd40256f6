"""Graph breaks and Python scopes: comprehensions and generator expressions whose
body breaks (nested code objects on 3.11, inlined into the function on 3.12),
closures made before a break and used after it, cells alive across a break,
locals still unbound at a break; and torch extension points around breaks:
autograd.Function, torch.library custom ops, module hooks. Each program is compared
with eager on fresh inputs with the number of graphs and breaks over two calls
(``(3.11 counts, 3.12 counts)`` where the versions differ)."""
import pytest
import torch
import torch.nn as nn

import surge
from breaks_corpus import expected_counts, mat, mat_grad
from corpus_harness import RecordingBackend, check_graph_breaks, randn, run_printing

# ---- comprehensions and generator expressions -------------------------------------------


def print_in_list_comprehension(x):
    return [(print(i), x * i)[1] for i in range(3)]


def break_in_dict_comprehension(x):
    return {i: (surge.graph_break(), x + i)[1] for i in range(2)}


def break_in_set_comprehension(x):
    return {int((surge.graph_break(), i)[1]) for i in range(3)}, x + 1


def item_in_comprehension_over_rows(x):
    return [r.sum().item() > -100 for r in x]


def comprehension_restores_outer_name(x):
    i = 10
    ys = [(print(i), x * i)[1] for i in range(3)]
    return torch.stack(ys) + i


def comprehension_filter_breaks(x):
    ys = [x * i for i in range(3) if print(i) is None]
    return torch.stack(ys)


def nested_comprehensions_break(x):
    return [[(surge.graph_break(), x * (i + j))[1] for j in range(2)] for i in range(2)]


def comprehension_inside_loop(x):
    out = x
    for k in range(2):
        out = sum([out * j for j in range(2) if print(k, j) is None])
    return out


def comprehension_then_break(x):
    ys = [x * i for i in range(3)]
    surge.graph_break()
    return torch.stack(ys)


def break_then_comprehension(x):
    surge.graph_break()
    return torch.stack([x * i for i in range(3)])


def generator_expression_with_item(x):
    return sum(t.sum().item() for t in x.unbind(0))


def generator_expression_with_print(x):
    return sum(t.sum() for t in [x, x * 2] if print("item") is None)


def generator_into_tuple(x):
    return tuple((surge.graph_break(), r * 2)[1] for r in x.unbind(0))


def comprehension_calls_breaking_helper(x):
    return torch.stack([_noisy(r) for r in x.unbind(0)])


def _noisy(t):
    print("noisy")
    return t.relu()


# ---- closures, cells, unbound locals -------------------------------------------------


def closure_made_before_break(x):
    s = 2.0

    def add(t):
        return t + s
    surge.graph_break()
    return add(x)


def closure_over_tensor_before_break(x):
    y = x.sin()

    def mul(t):
        return t * y
    print("mid")
    return mul(x)


def cell_rebound_after_break(x):
    k = 1

    def get():
        return k
    surge.graph_break()
    k = 5
    return x * get()


def closure_writes_cell_across_break(x):
    total = 0

    def bump(n):
        nonlocal total
        total += n
    bump(2)
    surge.graph_break()
    bump(3)
    return x * total, total


def two_closures_share_a_cell(x):
    state = [0]

    def inc():
        state[0] += 1

    def read():
        return state[0]
    inc()
    print("between")
    inc()
    return x + read()


def lambda_made_before_break(x):
    f = lambda t: t * 3  # noqa: E731
    surge.graph_break()
    return f(x)


def lambda_with_default_before_break(x):
    f = lambda t, k=x.mean(): t - k  # noqa: E731
    print("lambda default")
    return f(x)


def _make_counter():
    count = 0

    def step(t):
        nonlocal count
        count += 1
        print("step", count > 0)
        return t * count
    return step


def closure_returned_by_helper_used_after_break(x):
    step = _make_counter()
    y = step(x)
    return step(y)


def free_variable_of_compiled_closure(scale):
    def f(x):
        y = x * scale
        surge.graph_break()
        return y + scale
    return f


closure_root = free_variable_of_compiled_closure(3.0)


def unbound_local_at_break(x, flag):
    if flag:
        y = x * 2
    surge.graph_break()
    if flag:
        return y
    return x


def unbound_local_read_after_break_raises(x):
    if x.shape[0] > 100:
        y = x
    surge.graph_break()
    try:
        return y
    except UnboundLocalError:
        return x * -1


def deleted_local_across_break(x):
    y = x * 2
    z = y + 1
    del y
    print("deleted")
    return z


# ---- autograd.Function, custom ops, hooks -----------------------------------------


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def autograd_function_apply(x):
    y = Square.apply(x.sin())
    return y.sum()


def autograd_function_between_ops(x):
    a = x * 2
    b = Square.apply(a)
    return (b + a).mean()


class ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k, None


def autograd_function_with_python_argument(x):
    return ScaleGrad.apply(x.tanh(), 3.0).sum()


@torch.library.custom_op("surge_corpus::scaled", mutates_args=())
def scaled(x: torch.Tensor, k: float) -> torch.Tensor:
    return x * k


@scaled.register_fake
def _scaled_fake(x, k):
    return torch.empty_like(x)


@torch.library.custom_op("surge_corpus::shifted", mutates_args=())
def shifted_without_fake(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def custom_op_with_fake_kernel(x):
    return scaled(x.cos(), 3.0) + 1


def custom_op_without_fake_kernel(x):
    return shifted_without_fake(x.cos()) * 2


def custom_op_through_torch_ops(x):
    return torch.ops.surge_corpus.scaled(x.exp(), 0.5) - 1


class PreHookedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.register_forward_pre_hook(self._double_input)

    @staticmethod
    def _double_input(module, args):
        print("pre hook")
        return (args[0] * 2,)

    def forward(self, x):
        return self.lin(x).relu()


_PRE_HOOKED = PreHookedLinear()


def forward_pre_hook_that_breaks(x):
    return _PRE_HOOKED(x) + 1


class BackwardHookedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.register_full_backward_hook(lambda module, gin, gout: None)

    def forward(self, x):
        return self.lin(x * 2).relu()


_BACKWARD_HOOKED = BackwardHookedLinear()


def module_with_backward_hook(x):
    return _BACKWARD_HOOKED(x).sum()


PROGRAMS = {
    # program: (make_args, (graphs, breaks) over two calls [, 3.12 counts])
    print_in_list_comprehension: (mat, (3, 4), (3, 3)),
    break_in_dict_comprehension: (mat, (2, 3), (2, 2)),
    break_in_set_comprehension: (mat, (1, 7), (1, 6)),
    # The second call's .item() values are symbolic floats (automatic dynamic): one graph
    # fewer; the comprehension's iterations share its resume functions.
    item_in_comprehension_over_rows: (mat, (4, 4), (3, 3)),
    # 3.12: the iterations share resume functions; `i` is a constant at 0 and 1
    # (specialized), symbolic from 2: for three items, one graph more than unrolled.
    comprehension_restores_outer_name: (mat, (4, 4), (4, 3)),
    comprehension_filter_breaks: (mat, (4, 4), (4, 3)),
    nested_comprehensions_break: (mat, (4, 5), (4, 4)),
    comprehension_inside_loop: (mat, (3, 6), (3, 4)),
    comprehension_then_break: (mat, (2, 1)),
    break_then_comprehension: (mat, (1, 1)),
    generator_expression_with_item: (mat, (1, 1)),
    generator_expression_with_print: (mat, (1, 1)),
    generator_into_tuple: (mat, (1, 1)),
    comprehension_calls_breaking_helper: (mat, (3, 5), (3, 4)),
    closure_made_before_break: (mat, (1, 1)),
    closure_over_tensor_before_break: (mat, (2, 1)),
    cell_rebound_after_break: (mat, (1, 1)),
    closure_writes_cell_across_break: (mat, (1, 1)),
    two_closures_share_a_cell: (mat, (1, 1)),
    lambda_made_before_break: (mat, (1, 1)),
    lambda_with_default_before_break: (mat, (2, 1)),
    closure_returned_by_helper_used_after_break: (mat, (2, 4)),
    closure_root: (mat, (2, 1)),
    unbound_local_at_break: (lambda i: (randn(3), i == 0), (1, 2)),
    # Reading the unbound local is itself a break: CPython raises UnboundLocalError
    # into the user's handler.
    unbound_local_read_after_break_raises: (mat, (0, 2)),
    deleted_local_across_break: (mat, (1, 1)),
    # One node calling apply: the function's own forward and backward run.
    autograd_function_apply: (mat_grad, (1, 0)),
    autograd_function_between_ops: (mat_grad, (1, 0)),
    autograd_function_with_python_argument: (mat_grad, (1, 0)),
    custom_op_with_fake_kernel: (mat, (1, 0)),
    custom_op_without_fake_kernel: (mat, (2, 1)),
    custom_op_through_torch_ops: (mat, (1, 0)),
    forward_pre_hook_that_breaks: (mat, (3, 2)),
    # The hooked module runs in torch's own __call__ (its hooks join autograd there).
    module_with_backward_hook: (mat_grad, (3, 2)),
}


@pytest.mark.parametrize("program", list(PROGRAMS), ids=[p.__name__ for p in PROGRAMS])
def test_break_and_scopes(program):
    make_args, *counts = PROGRAMS[program]
    graphs, breaks = expected_counts(*counts)
    check_graph_breaks(program, make_args, graphs=graphs, breaks=breaks)


@pytest.mark.parametrize("program", [autograd_function_apply, autograd_function_between_ops,
                                     autograd_function_with_python_argument, module_with_backward_hook])
def test_gradients_equal_eager(program):
    x = randn(3, 4, requires_grad=True)
    compiled = surge.compile(program, backend=RecordingBackend())
    (grad,) = torch.autograd.grad(compiled(x), [x])
    (eager_grad,) = torch.autograd.grad(program(x), [x])
    torch.testing.assert_close(grad, eager_grad)


def test_custom_op_is_one_node_of_the_graph():
    backend = RecordingBackend()
    compiled = surge.compile(custom_op_with_fake_kernel, backend=backend)
    x = randn(3, 4)
    torch.testing.assert_close(compiled(x), custom_op_with_fake_kernel(x))
    targets = [n.target for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.ops.surge_corpus.scaled.default in targets


def test_custom_op_without_fake_kernel_breaks_with_a_clear_reason():
    report = surge.explain(custom_op_without_fake_kernel)(randn(3, 4))
    text = str(report)
    assert "surge_corpus::shifted" in text and "fake" in text
    assert "shifted_without_fake(x.cos())" in text


@pytest.mark.parametrize("backend", ["aot_eager", "cpp"])
def test_custom_op_through_the_aot_backends(backend):
    compiled = surge.compile(custom_op_with_fake_kernel, backend=backend)
    for _ in range(2):
        x = randn(3, 4)
        torch.testing.assert_close(compiled(x), custom_op_with_fake_kernel(x))


def test_closure_across_break_is_cached_not_recompiled():
    backend = RecordingBackend()
    compiled = surge.compile(closure_over_tensor_before_break, backend=backend)
    for _ in range(4):
        x = randn(3, 4)
        actual, _ = run_printing(lambda: compiled(x))
        expected, _ = run_printing(lambda: closure_over_tensor_before_break(x))
        torch.testing.assert_close(actual, expected)
    # The closure is made anew on every call: guarded by its code, not its identity.
    assert len(backend.graphs) == 2 and surge.counters["recompiles"] == 0


def _counter_root():
    total = 1.0

    def root(x):
        t = total

        def bump():
            nonlocal total
            total += 1
        surge.graph_break()
        bump()
        return x * t + total
    return root


def test_free_cell_of_the_root_is_shared_with_closures_across_the_break():
    eager, compiled = _counter_root(), surge.compile(_counter_root(), backend=RecordingBackend())
    for _ in range(3):
        x = randn(3)
        torch.testing.assert_close(compiled(x), eager(x))
    # bump() wrote the compiled function's own cell, as eager's bump() wrote eager's.
    assert compiled._surge_original.__closure__[0].cell_contents == eager.__closure__[0].cell_contents == 4.0
    assert surge.counters["fallbacks"] == 0


class _Base(nn.Module):
    def forward(self, x):
        return x * 2


class _SuperAfterBreak(_Base):
    def forward(self, x):
        print("before super")
        return super().forward(x) + 1


def test_zero_argument_super_after_a_break_runs_that_method_eagerly():
    module = _SuperAfterBreak()
    compiled = surge.compile(module, backend=RecordingBackend())
    for _ in range(2):
        x = randn(3)
        expected, eager_printed = run_printing(lambda: module(x))
        actual, printed = run_printing(lambda: compiled(x))
        torch.testing.assert_close(actual, expected)
        assert printed == eager_printed == "before super\n"
    # super() reads the frame's first local, which a resume function cannot provide.
    assert surge.counters["fallbacks"] == 1
