"""The public API around capture: decorator forms, backends by name and callable,
bad arguments, surge.reset, the cache size limit, surge.explain, counters, and
errors raised as eager raises them."""
import logging
import warnings

import pytest
import torch
import torch.nn as nn

import surge
import surge.errors
from corpus_harness import Args, CounterDelta, RecordingBackend, check_fn, compare_call, location_of, randn


def block(x, w, b, r):
    return torch.nn.functional.gelu(x @ w + b) + r


def block_args(i):
    return randn(4, 8), randn(8, 8), randn(8), randn(4, 8)


def test_counters_has_the_standard_names():
    for name in ("frames", "graphs", "graph_breaks", "recompiles", "cache_hits", "cache_misses", "fallbacks"):
        assert surge.counters[name] == 0


def test_bare_decorator():
    @surge.compile
    def f(x, y):
        return torch.relu(x @ y) + 1

    delta = CounterDelta()
    for i in range(2):
        x, y = randn(3, 4), randn(4, 2)
        torch.testing.assert_close(f(x, y), torch.relu(x @ y) + 1)
    assert delta["graphs"] == 1 and delta["cache_hits"] == 1, delta


def test_decorator_with_empty_parentheses():
    @surge.compile()
    def f(x):
        return x.sin() * 2

    x = randn(5)
    torch.testing.assert_close(f(x), x.sin() * 2)
    assert surge.counters["graphs"] == 1


def test_decorator_with_arguments_uses_the_backend():
    backend = RecordingBackend()

    @surge.compile(backend=backend, fullgraph=True)
    def f(x):
        return x.cos() + 1

    for _ in range(2):
        x = randn(5)
        torch.testing.assert_close(f(x), x.cos() + 1)
    assert len(backend.graphs) == 1 and isinstance(backend.graphs[0], torch.fx.GraphModule)


def test_call_form_with_eager_backend_by_name():
    compiled = surge.compile(block, backend="eager")
    for i in range(2):
        args = block_args(i)
        torch.testing.assert_close(compiled(*args), block(*args))
    assert surge.counters["graphs"] == 1 and surge.counters["cache_hits"] == 1


def test_default_backend():
    check_fn(block, block_args)
    compiled = surge.compile(block)
    args = block_args(0)
    torch.testing.assert_close(compiled(*args), block(*args))


def test_backend_receives_real_example_inputs():
    backend = check_fn(block, block_args)
    inputs = backend.example_inputs[0]
    assert len(inputs) == backend.placeholder_count(0)
    assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs)
    assert all(not t.is_meta for t in inputs)


def test_module_call_form_with_eager_backend():
    module = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    compiled = surge.compile(module, backend="eager")
    assert isinstance(compiled, nn.Module)
    x = randn(2, 4)
    torch.testing.assert_close(compiled(x), module(x))


@pytest.mark.parametrize(
    "kwargs,error,word",
    [
        ({"mode": "bogus"}, ValueError, "mode"),
        ({"dynamic": "always"}, ValueError, "dynamic"),
        ({"backend": "nope"}, ValueError, "nope"),
        ({"options": {"nope": 1}}, ValueError, "nope"),
        ({"backend": 123}, TypeError, "backend"),
    ],
    ids=["mode", "dynamic", "backend-name", "options", "backend-type"],
)
def test_bad_arguments_raise_at_compile_time(kwargs, error, word):
    with pytest.raises(error, match=word):
        surge.compile(block, **kwargs)
    with pytest.raises(error, match=word):
        surge.compile(**kwargs)(block)


def test_reset_drops_caches():
    backend = RecordingBackend()
    compiled = surge.compile(block, backend=backend)
    compare_call(compiled, block, block_args(0))
    compare_call(compiled, block, block_args(1))
    surge.reset()
    compare_call(compiled, block, block_args(2))
    assert len(backend.graphs) == 2, "after surge.reset() the program must be captured again"


def unrolled_sum(x, n):
    for i in range(n):
        x = x + i
    return x


# One program per cache-limit test: the limit warning is shown once per program.
def unrolled_product(x, n):
    for i in range(n):
        x = x * (i + 1)
    return x


def unrolled_difference(x, n):
    for i in range(n):
        x = x - i
    return x


def surge_warnings(caplog, caught):
    logged = [r for r in caplog.records if r.name.startswith("surge") and r.levelno >= logging.WARNING]
    return len(logged) + len(caught)


def test_cache_size_limit_runs_eagerly_with_one_warning(caplog):
    backend = RecordingBackend()
    compiled = surge.compile(unrolled_sum, backend=backend)
    delta = CounterDelta()
    with caplog.at_level(logging.WARNING, logger="surge"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(12):
            compare_call(compiled, unrolled_sum, (randn(4), n))
        compare_call(compiled, unrolled_sum, (randn(4), 0))
        compare_call(compiled, unrolled_sum, (randn(4), 15))
        assert surge_warnings(caplog, caught) == 1
    assert delta["recompiles"] == 8, delta
    # n = 0 does no tensor work: its entry hands no graph to the backend.
    assert len(backend.graphs) == 8, f"{len(backend.graphs)} graphs"


def test_cache_size_limit_from_options():
    backend = RecordingBackend()
    compiled = surge.compile(unrolled_product, backend=backend, options={"cache_size_limit": 2})
    for n in range(6):
        compare_call(compiled, unrolled_product, (randn(4), n))
    assert surge.counters["recompiles"] == 2 and len(backend.graphs) == 2  # n = 0 makes no graph


def test_cache_size_limit_from_environment(monkeypatch):
    monkeypatch.setenv("SURGE_CACHE_SIZE_LIMIT", "1")
    backend = RecordingBackend()
    compiled = surge.compile(unrolled_difference, backend=backend)
    for n in range(4):
        compare_call(compiled, unrolled_difference, (randn(4), n))
    assert surge.counters["recompiles"] == 1 and len(backend.graphs) == 1  # n = 0 makes no graph


def test_explain_report_of_captured_program():
    report = surge.explain(block)(*block_args(0))
    assert report.graph_count == 1
    assert report.graph_break_count == 0
    assert len(report.graphs) == 1 and isinstance(report.graphs[0], torch.fx.GraphModule)
    assert len(report.ops_per_graph) == 1 and len(report.ops_per_graph[0]) >= 3
    assert report.guards and not report.fallbacks
    text = str(report)
    assert "gelu" in text and "graph" in text.lower()
    guard_text = "\n".join(map(str, report.guards))
    assert "float32" in guard_text or "dtype" in guard_text, guard_text


def _breaks_with_print(x):
    y = x + 1
    print("debug", y.shape)  # UNSUPPORTED
    return y


def test_explain_report_of_graph_break_program():
    report = surge.explain(_breaks_with_print)(randn(3))
    # The prefix `x + 1` is one graph; the rest (return y) has no tensor work.
    assert report.graph_count == 1 and report.graph_break_count == 1
    assert not report.fallbacks
    text = str(report)
    assert location_of(_breaks_with_print, "# UNSUPPORTED") in text, text
    assert 'print("debug", y.shape)' in text and "print()" in text, text


def test_explain_of_module():
    module = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    report = surge.explain(module)(randn(3, 4))
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert "Linear" in str(report) or "linear" in str(report)


def test_failing_backend_falls_back_to_eager():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("backend exploded")

    compiled = surge.compile(block, backend=broken_backend)
    args = block_args(0)
    torch.testing.assert_close(compiled(*args), block(*args))
    assert surge.counters["fallbacks"] >= 1


def test_failing_backend_with_fullgraph_raises():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("backend exploded")

    compiled = surge.compile(block, backend=broken_backend, fullgraph=True)
    with pytest.raises(surge.errors.SurgeError, match="backend exploded"):
        compiled(*block_args(0))


def test_wrong_call_arguments_raise_type_error_like_eager():
    compiled = surge.compile(block, backend=RecordingBackend())
    with pytest.raises(TypeError):
        compiled(randn(2))


def test_shape_error_in_user_code_raises_like_eager():
    compiled = surge.compile(block, backend=RecordingBackend())
    with pytest.raises(RuntimeError):
        compiled(randn(4, 8), randn(7, 8), randn(8), randn(4, 8))


def test_user_exception_raised_like_eager():
    def checked(x, mode):
        if mode not in ("a", "b"):
            raise ValueError(f"unknown mode {mode}")
        return x * 2

    compiled = surge.compile(checked, backend=RecordingBackend())
    with pytest.raises(ValueError, match="unknown mode c"):
        compiled(randn(3), "c")
    x = randn(3)
    torch.testing.assert_close(compiled(x, "a"), x * 2)


def test_compiled_function_calling_compiled_function():
    inner = surge.compile(lambda t: t.tanh() * 2)

    def outer(x):
        return inner(x) + 1

    compiled = surge.compile(outer)
    for _ in range(2):
        x = randn(4)
        torch.testing.assert_close(compiled(x), x.tanh() * 2 + 1)


def test_two_compiled_wrappers_of_one_function_use_their_own_backends():
    first, second = RecordingBackend(), RecordingBackend()
    a = surge.compile(block, backend=first)
    b = surge.compile(block, backend=second)
    compare_call(a, block, block_args(0))
    compare_call(b, block, block_args(1))
    assert len(first.graphs) == 1 and len(second.graphs) == 1


def test_kwargs_call_matches_positional_call():
    compiled = surge.compile(block, backend=RecordingBackend())
    x, w, b, r = block_args(0)
    compare_call(compiled, block, Args(x, w, b=b, r=r))
    compare_call(compiled, block, Args(x=x, w=w, b=b, r=r))


class DecoratedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    @surge.compile
    def forward(self, x):
        return self.fc(x).relu()


def test_decorated_method_binds_self():
    modules = [DecoratedForward(), DecoratedForward()]
    for _ in range(2):
        for module in modules:
            x = randn(2, 4)
            torch.testing.assert_close(module(x), module.fc(x).relu())
    assert surge.counters["fallbacks"] == 0 and surge.counters["graphs"] >= 1


def test_bound_forward_compiled_directly():
    module = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    backend = RecordingBackend()
    compiled_forward = surge.compile(module.forward, backend=backend)
    for _ in range(2):
        x = randn(2, 4)
        torch.testing.assert_close(compiled_forward(x), module(x))
    assert len(backend.graphs) == 1
