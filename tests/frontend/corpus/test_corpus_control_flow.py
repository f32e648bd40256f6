"""Python control flow on Python values: if/elif/else, for and while loops
(unrolled), break/continue, nested loops, try/except/finally, with blocks."""
import contextlib

import pytest
import torch

from corpus_harness import Args, check_fn, randn


def mat(i):
    return (randn(4, 4),)


def for_range_unrolled(x):
    for i in range(4):
        x = x * 0.5 + i
    return x


def for_range_step_negative(x):
    acc = torch.zeros_like(x)
    for i in range(6, 0, -2):
        acc = acc + x * i
    return acc


def while_loop_on_counter(x):
    n = 0
    while n < 5:
        x = torch.tanh(x) + n
        n += 1
    return x, n


def while_with_break(x):
    total = 0
    step = 1
    while True:
        total += step
        step *= 2
        if total > 20:
            break
    return x * total, step


def for_with_continue_and_else(x):
    hits = []
    for k in range(6):
        if k % 2:
            continue
        hits.append(k)
    else:
        hits.append(-1)
    return x * sum(hits), hits


def for_with_break_skips_else(x):
    found = None
    for k in range(10):
        if k * k > 10:
            found = k
            break
    else:
        found = -1
    return x + found


def nested_loops(x):
    out = []
    for i in range(2):
        row = []
        for j in range(3):
            row.append(x[i, j] * (i + j))
        out.append(torch.stack(row))
    return torch.stack(out)


def if_elif_else_on_shape(x):
    if x.shape[0] > 8:
        return x.sum()
    elif x.shape[0] == 4:
        return x.mean(0)
    else:
        return x


def if_on_dim_and_dtype(x):
    if x.dim() == 2 and x.dtype == torch.float32:
        x = x.t()
    if x.is_floating_point():
        x = x * 1.5
    return x


def early_return_in_loop(x):
    for i in range(5):
        x = x + i
        if i == 2:
            return x, i
    return x, -1


def loop_over_tensor_list(xs):
    acc = xs[0]
    for t in xs[1:]:
        acc = acc + t
    return acc


def loop_over_first_dim_of_tensor(x):
    # Iterating over a tensor yields its rows; the row count is static.
    rows = [row * k for k, row in enumerate(x)]
    return torch.stack(rows)


def try_except_on_python_value(x, key):
    table = {"a": 1.0}
    try:
        scale = table[key]
    except KeyError:
        scale = -1.0
    return x * scale


def try_finally(x):
    log = []
    try:
        y = x * 2
        log.append("body")
    finally:
        log.append("finally")
    return y, log


def with_null_context(x):
    with contextlib.nullcontext():
        y = x.relu()
    return y + 1


def assert_on_python_value(x):
    assert x.dim() == 2, "expects a matrix"
    assert x.shape[1] == 4
    return x.softmax(-1)


def loop_accumulating_python_and_tensor(x):
    count = 0
    total = 0.0
    for i in range(1, 4):
        count += 1
        total += 1.0 / i
        x = x * total
    return x, count, total


def while_over_list_pop(x):
    queue = [1, 2, 3]
    while queue:
        x = x * queue.pop()
    return x


def match_statement(x, mode):
    match mode:
        case "double":
            return x * 2
        case "neg":
            return -x
        case _:
            return x.clone()


def residual_loop_with_schedule(x, ws):
    for i, w in enumerate(ws):
        h = torch.relu(x @ w)
        x = x + h if i % 2 == 0 else x - 0.1 * h
    return x


def ws_args(i):
    return randn(3, 4), [randn(4, 4) for _ in range(4)]


CASES = [
    (for_range_unrolled, mat),
    (for_range_step_negative, mat),
    (while_loop_on_counter, mat),
    (while_with_break, mat),
    (for_with_continue_and_else, mat),
    (for_with_break_skips_else, mat),
    (nested_loops, mat),
    (if_elif_else_on_shape, mat),
    (if_elif_else_on_shape, lambda i: (randn(9, 2),)),
    (if_on_dim_and_dtype, lambda i: (randn(2, 5),)),
    (early_return_in_loop, mat),
    (loop_over_tensor_list, lambda i: ([randn(3) for _ in range(4)],)),
    (loop_over_first_dim_of_tensor, mat),
    (try_except_on_python_value, lambda i: (randn(4, 4), "b")),
    (try_except_on_python_value, lambda i: (randn(4, 4), "a")),
    (try_finally, mat),
    (with_null_context, mat),
    (assert_on_python_value, mat),
    (loop_accumulating_python_and_tensor, mat),
    (while_over_list_pop, mat),
    (match_statement, lambda i: (randn(4, 4), "double")),
    (match_statement, lambda i: (randn(4, 4), "other")),
    (residual_loop_with_schedule, ws_args),
]


@pytest.mark.parametrize(
    "program,make_args", CASES, ids=[f"{fn.__name__}-{n}" for n, (fn, _) in enumerate(CASES)]
)
def test_control_flow_program(program, make_args):
    check_fn(program, make_args)


def test_loop_count_from_argument_recompiles_per_value():
    def repeat(x, n):
        for _ in range(n):
            x = x * 2 - 1
        return x

    check_fn(repeat, lambda i: Args(randn(4), n=2 + i), graphs=2)


class ConfigError(Exception):
    pass


def _validate(width):
    if width % 2:
        raise ConfigError(f"odd width {width}")
    return width // 2


def exception_from_inlined_call_caught(x, width):
    try:
        half = _validate(width)
    except ConfigError as err:
        return x * -1, str(err)
    return x[:, :half], "ok"


def finally_runs_on_return_path(x):
    events = []
    for i in range(3):
        try:
            if i == 1:
                return x * i, events
            events.append(i)
        finally:
            events.append(f"finally {i}")
    return x, events


def short_circuit_with_calls(x, items):
    calls = []

    def probe(name, value):
        calls.append(name)
        return value

    if probe("a", len(items) > 5) and probe("b", True):
        x = x * 2
    if probe("c", not items) or probe("d", x.dim() == 2):
        x = x + 1
    return x, calls


def nested_break_continue_else(x):
    out = []
    for i in range(4):
        for j in range(4):
            if j > i:
                break
            if (i + j) % 2:
                continue
            out.append(x * (i - j))
        else:
            out.append(x.sum())
    return out


@pytest.mark.parametrize(
    "program,make_args",
    [
        (exception_from_inlined_call_caught, lambda i: (randn(3, 8), 4)),
        (exception_from_inlined_call_caught, lambda i: (randn(3, 8), 3)),
        (finally_runs_on_return_path, lambda i: (randn(3),)),
        (short_circuit_with_calls, lambda i: (randn(3, 2), [])),
        (short_circuit_with_calls, lambda i: (randn(3, 2), list(range(7)))),
        (nested_break_continue_else, lambda i: (randn(2),)),
    ],
    ids=["caught-ok", "caught-error", "finally-return", "short-circuit-empty", "short-circuit-long", "nested-break"],
)
def test_exceptions_and_jumps(program, make_args):
    check_fn(program, make_args)
