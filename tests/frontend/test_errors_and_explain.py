"""Unsupported constructs, internal errors and failing backends: eager fallback, or
errors naming the user's file:line under fullgraph=True; and surge.explain."""
import inspect
import os

import pytest
import torch

import surge
from frontend_helpers import Recorder, same
from surge.errors import BackendCompilerFailed, InternalError, Unsupported


def helper_with_item(x):
    return x * x.sum().item()  # MARK


def calls_helper(x):
    return helper_with_item(x + 1)


def line_of(fn, marker="# MARK"):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def test_break_in_inlined_callee_splits_the_caller_at_the_call():
    rec = Recorder()
    compiled = surge.compile(calls_helper, backend=rec)
    for _ in range(3):
        x = torch.randn(3)
        same(compiled(x), calls_helper(x))
    # Graph of `x + 1`; the caller breaks at the call and the helper, compiled on its
    # own, breaks at .item(): its graph of x.sum(), then `x * value` for the first value and,
    # once the value changed, one graph with the value symbolic (automatic dynamic).
    assert [rec.ops(i) for i in range(len(rec.graphs))] == [["add"], ["sum"], ["mul"], ["mul"]]
    assert surge.counters["graph_breaks"] == 2 and surge.counters["fallbacks"] == 0


def test_fullgraph_error_names_the_innermost_user_line():
    compiled = surge.compile(calls_helper, fullgraph=True)
    with pytest.raises(Unsupported) as info:
        compiled(torch.randn(3))
    message = str(info.value)
    assert f"{os.path.basename(__file__)}:{line_of(helper_with_item)}" in message
    assert "item()" in message and "x.sum().item()" in message


@pytest.mark.parametrize("construct", ["print", "graph_break", "branch", "numpy"])
def test_unsupported_constructs_break_the_graph(construct, capsys):
    def f(x):
        y = x * 2
        if construct == "print":
            print("value", y.shape)
        elif construct == "graph_break":
            surge.graph_break()
        elif construct == "branch":
            if y.sum() > 0:
                y = y + 1
        else:
            y = y + float(y.numpy().sum())
        return y

    rec = Recorder()
    compiled = surge.compile(f, backend=rec)
    x = torch.rand(3) + 0.5  # positive: the branch is taken
    same(compiled(x), f(x))
    assert surge.counters["fallbacks"] == 0 and surge.counters["graph_breaks"] >= 1
    # `x * 2` (and the condition) before the break; `y + 1` / `y + float(...)` after it.
    assert rec.ops(0)[0] == "mul"
    assert len(rec.graphs) == (1 if construct in ("print", "graph_break") else 2)
    if construct == "print":
        assert capsys.readouterr().out == "value torch.Size([3])\nvalue torch.Size([3])\n"
    report = surge.explain(f)(x)
    assert report.graph_break_count >= 1 and not report.fallbacks
    assert f"{os.path.basename(__file__)}:" in str(report)


def test_failing_backend_falls_back_or_raises():
    def broken(gm, example_inputs):
        raise RuntimeError("backend exploded")

    def f(x):
        return x + 1

    x = torch.randn(2)
    same(surge.compile(f, backend=broken)(x), x + 1)
    assert surge.counters["fallbacks"] == 1
    with pytest.raises(BackendCompilerFailed, match="backend exploded"):
        surge.compile(f, backend=broken, fullgraph=True)(x)


def test_internal_errors_fall_back_unless_asked(monkeypatch):
    from surge.frontend.interpreter import registry

    def explode(frame, inst):
        raise ZeroDivisionError("bug in a handler")

    monkeypatch.setitem(registry.HANDLERS, "BINARY_OP", explode)

    def f(x):
        return x + 1

    x = torch.randn(2)
    same(surge.compile(f)(x), x + 1)
    assert surge.counters["fallbacks"] == 1
    surge.reset()
    with pytest.raises(InternalError, match="bug in a handler"):
        surge.compile(f, fullgraph=True)(x)
    surge.reset()
    with pytest.raises(ZeroDivisionError):
        surge.compile(f, options={"raise_internal_errors": True})(x)


def test_explain_reports_graphs_guards_and_ops():
    def f(x, w):
        return torch.softmax(x @ w, dim=-1).sum(0)

    report = surge.explain(f)(torch.randn(2, 3), torch.randn(3, 4))
    assert report.graph_count == 1 and report.graph_break_count == 0 and report.fallbacks == []
    assert report.ops_per_graph == [["operator.matmul", "torch.softmax", "Tensor.sum"]]
    assert isinstance(report.graphs[0], torch.fx.GraphModule)
    assert "L['x']: Tensor(float32" in report.guards[0]
    text = str(report)
    assert "Graph count: 1" in text and "Guards of cache entry 1" in text
    # explain uses its own cache: a later compile still captures.
    rec = Recorder()
    surge.compile(f, backend=rec)(torch.randn(2, 3), torch.randn(3, 4))
    assert len(rec.graphs) == 1


def test_user_code_is_neither_torch_nor_surge_internals():
    import os

    import torch

    import surge
    from surge.frontend.interpreter.frame import is_user_code

    package = os.path.dirname(os.path.abspath(surge.__file__))
    assert not is_user_code(os.path.join(os.path.dirname(torch.__file__), "nn", "functional.py"))
    assert not is_user_code(os.path.join(package, "frontend", "interpreter", "frame.py"))
    assert is_user_code(os.path.join(package, "models", "gpt.py"))        # bundled models are compiled as user code
    assert is_user_code(os.path.join(package, "tools", "workloads.py"))
    assert is_user_code(os.path.abspath("train.py"))


def test_callees_in_bundled_models_compile_as_user_code():
    """A break inside a bundled model's function resumes inside it, as in the user's own code."""
    import os

    import surge
    from surge.frontend.compiled_callees import _is_user_file

    package = os.path.dirname(os.path.abspath(surge.__file__))
    assert _is_user_file(os.path.join(package, "models", "gpt.py"), "surge.models.gpt")
    assert not _is_user_file(os.path.join(package, "frontend", "capture.py"), "surge.frontend.capture")
