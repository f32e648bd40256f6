"""Side effects a captured program must keep as eager does: in-place updates of
inputs, globals and buffers, attribute writes, list appends, and the errors eager
raises for invalid tensor code."""
import pytest
import torch
import torch.nn as nn

import surge
from corpus_harness import Args, RecordingBackend, check_fn, compare_call, randn

STEP_COUNT = torch.zeros(())
HISTORY = []


def input_updated_in_place(x, y):
    x += y
    x.mul_(2)
    return x


def input_row_updated_by_setitem(x):
    x[0] += 1.0
    x[:, -1] = 0.0
    return x.sum()


def input_list_element_updated(xs):
    xs[0].add_(1.0)
    return xs[1] * 2


@pytest.mark.parametrize(
    "program,make_args",
    [
        (input_updated_in_place, lambda i: (randn(3, 4), randn(3, 4))),
        (input_row_updated_by_setitem, lambda i: (randn(3, 4),)),
        (input_list_element_updated, lambda i: ([randn(3), randn(3)],)),
    ],
    ids=["add_and_mul_in_place", "setitem_rows", "list_element_in_place"],
)
def test_input_mutation_reaches_caller(program, make_args):
    check_fn(program, make_args)


def test_returned_in_place_result_is_the_input_object():
    compiled = surge.compile(input_updated_in_place, backend=RecordingBackend())
    x = randn(3, 4)
    assert compiled(x, randn(3, 4)) is x


def counts_steps(x):
    STEP_COUNT.add_(1)
    return x * STEP_COUNT


def test_global_tensor_updated_in_place_each_call(monkeypatch):
    monkeypatch.setitem(globals(), "STEP_COUNT", torch.zeros(()))
    backend = RecordingBackend()
    compiled = surge.compile(counts_steps, backend=backend)
    for step in range(1, 4):
        x = randn(4)
        torch.testing.assert_close(compiled(x), x * step)
        assert STEP_COUNT.item() == step
    assert len(backend.graphs) == 1


def records_history(x):
    HISTORY.append(x.shape[0])
    return x.relu()


def test_global_list_append_happens_every_call(monkeypatch):
    monkeypatch.setitem(globals(), "HISTORY", [])
    compiled = surge.compile(records_history, backend=RecordingBackend())
    compiled(randn(3))
    compiled(randn(3))
    compiled(randn(5))
    assert HISTORY == [3, 3, 5]


class RememberLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.last_batch = None

    def forward(self, x):
        self.calls += 1
        self.last_batch = x.shape[0]
        return self.fc(x)


def test_module_buffer_and_attribute_writes_reach_original():
    module = RememberLast()
    compiled = surge.compile(module, backend=RecordingBackend())
    compiled(randn(2, 4))
    compiled(randn(2, 4))
    assert int(module.calls) == 2 and module.last_batch == 2


def test_invalid_negative_tensor_step_raises_like_eager():
    def reverse(x):
        return x[::-1]

    with pytest.raises(ValueError):
        reverse(randn(4))
    compiled = surge.compile(reverse, backend=RecordingBackend())
    with pytest.raises(ValueError):
        compiled(randn(4))


def test_leaf_in_place_with_grad_raises_like_eager():
    def bump(w):
        w.add_(1.0)
        return w

    compiled = surge.compile(bump, backend=RecordingBackend())
    with pytest.raises(RuntimeError):
        compiled(randn(3, requires_grad=True))


RESULTS_BY_NAME = {}


def mutate_through_view(x):
    flat = x.view(-1)
    flat.add_(1.0)
    x[0].mul_(2.0)
    return x


def out_argument_and_copy(a, b, dst, scratch):
    torch.add(a, b, out=dst)
    scratch.copy_(a * b)
    return dst.sum()


def writes_into_argument_dict(x, results):
    results["double"] = x * 2
    results.pop("stale", None)
    return x.sum()


def sorts_argument_list(x, order):
    order.sort()
    return x[order[0]]


@pytest.mark.parametrize(
    "program,make_args",
    [
        (mutate_through_view, lambda i: (randn(3, 4),)),
        (out_argument_and_copy, lambda i: (randn(4), randn(4), torch.empty(4), torch.zeros(4))),
        (writes_into_argument_dict, lambda i: (randn(3), {"stale": 1, "keep": 2})),
        (sorts_argument_list, lambda i: (randn(5), [3, 1, 2])),
    ],
    ids=["through_view", "out_and_copy", "argument_dict", "argument_list_sort"],
)
def test_argument_mutation_reaches_caller(program, make_args):
    check_fn(program, make_args)


def records_by_name(x, name):
    RESULTS_BY_NAME[name] = x.mean()
    return x * 2


def test_global_dict_written_by_the_program(monkeypatch):
    monkeypatch.setitem(globals(), "RESULTS_BY_NAME", {})
    compiled = surge.compile(records_by_name, backend=RecordingBackend())
    xs = {"a": randn(3), "b": randn(3)}
    for name, x in xs.items():
        torch.testing.assert_close(compiled(x, name), x * 2)
    assert list(RESULTS_BY_NAME) == ["a", "b"]
    for name, x in xs.items():
        torch.testing.assert_close(RESULTS_BY_NAME[name], x.mean())


def test_generator_function_compiled():
    def running_sums(x, steps):
        acc = torch.zeros_like(x)
        for i in range(steps):
            acc = acc + x * i
            yield acc

    compiled = surge.compile(running_sums, backend=RecordingBackend())
    for steps in (2, 3):
        x = randn(3)
        got = list(compiled(x, steps))
        expected = list(running_sums(x, steps))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)


def test_varargs_called_with_different_counts():
    def total(*xs):
        return sum(x.sum() for x in xs)

    backend = RecordingBackend()
    compiled = surge.compile(total, backend=backend)
    for n in (1, 2, 3, 2):
        xs = [randn(3) for _ in range(n)]
        compare_call(compiled, total, tuple(xs))
    assert len(backend.graphs) == 3


def test_keyword_order_does_not_change_results():
    def combine(x, *, a, b):
        return x * a - b

    compiled = surge.compile(combine, backend=RecordingBackend())
    compare_call(compiled, combine, Args(randn(3), a=2.0, b=1.0))
    compare_call(compiled, combine, Args(randn(3), b=1.0, a=2.0))
    compare_call(compiled, combine, Args(randn(3), b=2.0, a=1.0))


def test_errors_raised_by_python_code_propagate_like_eager():
    def risky(x, n, table):
        table.append(n)
        scale = 1 / n
        return x * scale * table[-1], {"a": 1}["b" if n > 5 else "a"]

    compiled = surge.compile(risky, backend=RecordingBackend())
    log = []
    with pytest.raises(ZeroDivisionError):
        compiled(randn(3), 0, log)
    assert log == [0], "side effects before the error must have happened, as in eager"
    with pytest.raises(KeyError):
        compiled(randn(3), 7, log)
    x = randn(3)
    out, one = compiled(x, 2, log)
    torch.testing.assert_close(out, x * 0.5 * 2)
    assert one == 1 and log == [0, 7, 2]
