"""What a new user meets first: fallback warnings, raise_internal_errors, bad backends,
SURGE_LOGS, recompile messages, counters, torch._dynamo.graph_break() and pickling."""
import copy
import inspect
import io
import logging
import os
import pickle

import pytest
import torch

import surge
from frontend_helpers import Recorder, same
from surge.errors import BackendCompilerFailed, InvalidBackend

HERE = os.path.basename(__file__)


def surge_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "surge" and r.levelno >= logging.WARNING]


def first_line(fn) -> str:
    return f"{HERE}:{inspect.getsourcelines(fn)[1]}"


def exploding_backend(gm, example_inputs):
    raise RuntimeError("backend exploded")


def add_one(x):
    return x + 1


# ---- fallbacks speak by default ----------------------------------------------

def test_a_backend_failure_warns_once_per_code_object(caplog):
    # dynamic=False: three shapes, three captures, each falls back (a changed size would
    # otherwise be symbolic, and that capture's fallback entry would serve the third)
    compiled = surge.compile(add_one, backend=exploding_backend, dynamic=False)
    with caplog.at_level(logging.WARNING, logger="surge"):
        for n in (2, 3, 4):
            x = torch.randn(n)
            same(compiled(x), x + 1)
    assert surge.counters.fallbacks == 3
    [warning] = surge_warnings(caplog)
    assert "add_one" in warning and first_line(add_one) in warning
    assert "backend exploded" in warning and "SURGE_LOGS=fallbacks" in warning and "surge.explain" in warning
    assert "\n" not in warning


def test_an_internal_error_warns_and_a_graph_break_does_not(caplog, monkeypatch):
    def breaks(x):
        y = x * 2
        surge.graph_break()
        return y + 1

    with caplog.at_level(logging.WARNING, logger="surge"):
        x = torch.randn(3)
        same(surge.compile(breaks, backend=Recorder())(x), breaks(x))
        assert surge.counters.graph_breaks == 1 and not surge_warnings(caplog)

        from surge.frontend.interpreter import registry

        def explode(frame, inst):
            raise ZeroDivisionError("bug in a handler")
        monkeypatch.setitem(registry.HANDLERS, "BINARY_OP", explode)
        same(surge.compile(add_one, backend=Recorder())(x), x + 1)
    [warning] = surge_warnings(caplog)
    assert "internal error: ZeroDivisionError: bug in a handler" in warning and "add_one" in warning


def test_warnings_are_silenced_by_the_log_spec_or_the_option(caplog, monkeypatch):
    x = torch.randn(2)
    with caplog.at_level(logging.WARNING, logger="surge"):
        monkeypatch.setenv("SURGE_LOGS", "-fallbacks")
        same(surge.compile(add_one, backend=exploding_backend)(x), x + 1)
        monkeypatch.delenv("SURGE_LOGS")
        surge.reset()  # forgets which code was warned about
        same(surge.compile(add_one, backend=exploding_backend, options={"warn_fallbacks": False})(x), x + 1)
        monkeypatch.setenv("SURGE_WARN_FALLBACKS", "0")
        surge.reset()
        same(surge.compile(add_one, backend=exploding_backend)(x), x + 1)
    assert not surge_warnings(caplog)
    assert surge.counters.fallbacks == 3  # still counted


def test_a_graph_the_aot_layer_refuses_is_announced_at_the_users_function(caplog):
    def marks_grad(x):
        x.requires_grad_()
        return x * 2

    with caplog.at_level(logging.WARNING, logger="surge"):
        x = torch.randn(3)
        torch.testing.assert_close(surge.compile(marks_grad, backend="aot_eager")(x.clone()), x * 2)
    [warning] = surge_warnings(caplog)
    assert "a graph of " in warning and "marks_grad" in warning and first_line(marks_grad) in warning
    assert "requires_grad_()" in warning and surge.counters.fallbacks == 1


def test_a_graph_run_eagerly_on_a_later_call_names_the_users_function(caplog):
    def bump_then_read(a, b):
        a.add_(1.0)
        return b * 2

    compiled = surge.compile(bump_then_read, backend="aot_eager")
    with caplog.at_level(logging.WARNING, logger="surge"):
        x, y = torch.randn(3), torch.randn(3)
        torch.testing.assert_close(compiled(x, y), y * 2)
        assert not surge_warnings(caplog)
        base = torch.randn(4)
        expected = (base + 1.0)[1:3] * 2
        torch.testing.assert_close(compiled(base, base[1:3]), expected)  # aliasing: runs eagerly
    [warning] = surge_warnings(caplog)
    assert "bump_then_read" in warning and "shares memory" in warning


def test_a_dtype_the_cpp_backend_refuses_is_announced(caplog):
    def doubled_abs(x):
        return (x * 2).abs()

    x = torch.randn(4, dtype=torch.complex64)
    with caplog.at_level(logging.WARNING, logger="surge"):
        torch.testing.assert_close(surge.compile(doubled_abs, backend="cpp")(x), doubled_abs(x))
    [warning] = surge_warnings(caplog)
    assert "doubled_abs" in warning and "complex64" in warning and "'cpp'" in warning


def test_the_cache_size_limit_is_a_counted_fallback(caplog):
    def scaled(x, n):
        return x * n

    compiled = surge.compile(scaled, backend=Recorder(), options={"cache_size_limit": 1})
    with caplog.at_level(logging.WARNING, logger="surge"):
        for n in range(4):
            x = torch.randn(2)
            same(compiled(x, n), x * n)
    [warning] = surge_warnings(caplog)
    assert "cache_size_limit=1" in warning and "L['n'] == 1 failed: actual 2" in warning
    assert surge.counters.fallbacks == 1 and surge.counters.recompiles == 1


# ---- raise_internal_errors -----------------------------------------------------

def test_raise_internal_errors_raises_the_original_error_with_context(monkeypatch):
    from surge.frontend.interpreter import registry

    def explode(frame, inst):
        raise ZeroDivisionError("bug in a handler")
    monkeypatch.setitem(registry.HANDLERS, "BINARY_OP", explode)
    x = torch.randn(2)
    with pytest.raises(ZeroDivisionError) as info:
        surge.compile(add_one, backend=Recorder(), options={"raise_internal_errors": True})(x)
    note = "\n".join(info.value.__notes__)
    assert "capture of add_one" in note and first_line(add_one) in note
    assert surge.counters.fallbacks == 0


def test_raise_internal_errors_from_the_environment_raises_a_backend_error(monkeypatch):
    monkeypatch.setenv("SURGE_RAISE_INTERNAL_ERRORS", "1")
    with pytest.raises(RuntimeError, match="backend exploded") as info:
        surge.compile(add_one, backend=exploding_backend)(torch.randn(2))
    assert "backend's compile" in "\n".join(info.value.__notes__)


# ---- bad backends -------------------------------------------------------------

def test_a_backend_returning_none_falls_back_with_a_warning_or_raises_under_fullgraph(caplog):
    def returns_none(gm, example_inputs):
        return None

    x = torch.randn(2)
    with caplog.at_level(logging.WARNING, logger="surge"):
        same(surge.compile(add_one, backend=returns_none)(x), x + 1)
    [warning] = surge_warnings(caplog)
    assert "returns_none returned NoneType, not a callable" in warning
    with pytest.raises(BackendCompilerFailed, match="returns_none returned NoneType, not a callable; a backend is called as backend.gm"):
        surge.compile(add_one, backend=returns_none, fullgraph=True)(x)


def test_backends_that_cannot_be_called_are_refused_at_compile():
    with pytest.raises(InvalidBackend, match="one_argument cannot be called as backend.gm, example_inputs."):
        def one_argument(gm):
            return gm.forward
        surge.compile(add_one, backend=one_argument)
    with pytest.raises(InvalidBackend, match="must be a name or a callable, got int 3; a backend is called as"):
        surge.compile(add_one, backend=3)
    assert isinstance(InvalidBackend("x"), TypeError)


# ---- SURGE_LOGS -------------------------------------------------------------------

def test_an_unknown_log_channel_gets_one_warning_listing_the_channels(monkeypatch, caplog, capsys):
    monkeypatch.setenv("SURGE_LOGS", "recompiles,first_hour_bogus")
    with caplog.at_level(logging.WARNING, logger="surge"):
        compiled = surge.compile(add_one, backend=Recorder())
        for n in (2, 3):
            compiled(torch.randn(n))
    [warning] = surge_warnings(caplog)
    assert "first_hour_bogus" in warning and "output_code" in warning and "fallbacks" in warning
    assert "[surge:recompiles]" in capsys.readouterr().err  # the known channel still prints


def test_minus_removes_a_channel_from_all(monkeypatch):
    from surge import logs

    monkeypatch.setenv("SURGE_LOGS", "all,-perf")
    assert logs.enabled("graph") and not logs.enabled("perf") and logs.removed("perf")


def test_output_code_prints_graphs_loaded_from_the_graph_cache(monkeypatch, capsys, tmp_path):
    def sin_scaled(x):
        return torch.sin(x) * 3

    monkeypatch.setenv("SURGE_LOGS", "output_code")
    x = torch.randn(8)
    for _ in range(2):  # compiled, then (in-memory caches dropped) loaded from the graph cache
        surge.reset()
        compiled = surge.compile(sin_scaled, backend="cpp", options={"cache_dir": str(tmp_path)})
        torch.testing.assert_close(compiled(x), sin_scaled(x))
    assert surge.counters["graph_cache_hits"] == 1
    err = capsys.readouterr().err
    assert err.count("[surge:output_code]") == 2 and "(from the graph cache)" in err


# ---- recompile messages ---------------------------------------------------------

def test_recompile_log_and_explain_name_the_failing_value(monkeypatch, capsys):
    def scaled(x, n):
        return x * n

    monkeypatch.setenv("SURGE_LOGS", "recompiles")
    compiled = surge.compile(scaled, backend=Recorder())
    compiled(torch.randn(8), 3)
    compiled(torch.randn(9), 3)
    compiled(torch.randn(9), 4)
    err = capsys.readouterr().err
    assert "shape=[9] (expected [8])" in err
    assert "L['n'] == 3 failed: actual 4" in err

    def helper(x):
        print("a graph break")
        return x * 2

    def calls_twice(x):
        return helper(helper(x)[:2])

    report = surge.explain(calls_twice)(torch.randn(4))
    assert any("shape=[2] (expected [4])" in reason for reason in report.recompile_reasons), report
    assert "Recompile reasons:" in str(report)


# ---- counters ---------------------------------------------------------------------

def test_counters_read_as_attributes():
    from surge.counters import COUNTER_NAMES

    surge.compile(add_one, backend=Recorder())(torch.randn(2))
    for name in COUNTER_NAMES:
        assert getattr(surge.counters, name) == surge.counters[name]
    assert surge.counters.graphs == 1
    with pytest.raises(AttributeError, match="no counter 'graph_brakes'"):
        surge.counters.graph_brakes
    assert repr(surge.counters).startswith("surge.counters(frames=")


# ---- torch._dynamo.graph_break() ---------------------------------------------------

def test_dynamo_graph_break_is_a_graph_break():
    import torch._dynamo

    def written_for_torch_compile(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y + 1

    rec = Recorder()
    x = torch.randn(3)
    same(surge.compile(written_for_torch_compile, backend=rec)(x), written_for_torch_compile(x))
    assert len(rec.graphs) == 2 and rec.ops(0) == ["mul"] and rec.ops(1) == ["add"]
    assert surge.counters.graph_breaks == 1 and surge.counters.fallbacks == 0
    [reason] = surge.explain(written_for_torch_compile)(x).break_reasons
    assert "torch._dynamo.graph_break()" in reason.reason


# ---- pickling ---------------------------------------------------------------------

def test_a_compiled_module_round_trips_through_torch_save_and_comes_back_compiled():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    compiled = surge.compile(model, backend="aot_eager", options={"cache_size_limit": 3})
    x = torch.randn(3, 4)
    compiled(x)
    buffer = io.BytesIO()
    torch.save(compiled, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert type(loaded) is type(compiled) and loaded._surge_options == compiled._surge_options
    for (name, p), (name2, q) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert name == name2 and torch.equal(p, q)
    surge.counters.reset()
    x = torch.randn(5, 4)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
    assert surge.counters.graphs == 1  # compiled again on its first call
    again = pickle.loads(pickle.dumps(compiled))
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x))
    copied = copy.deepcopy(compiled)  # its own parameters, compiled again
    with torch.no_grad():
        copied._orig_mod[0].weight.add_(1.0)
        torch.testing.assert_close(copied(x), copied._orig_mod(x))
        assert not torch.allclose(copied(x), model(x))


def module_level_relu(x):
    return torch.relu(x) * 2


compiled_under_another_name = surge.compile(module_level_relu, backend="eager")


@surge.compile(backend="eager")
def decorated_in_place(x):
    return x - 1


def test_compiled_functions_pickle_by_reference_or_say_why_not():
    loaded = pickle.loads(pickle.dumps(compiled_under_another_name))
    assert loaded is not compiled_under_another_name and loaded._surge_original is module_level_relu
    surge.counters.reset()
    x = torch.randn(3)
    same(loaded(x), module_level_relu(x))
    assert surge.counters.graphs == 1
    assert pickle.loads(pickle.dumps(decorated_in_place)) is decorated_in_place
    with pytest.raises(pickle.PicklingError, match=f"<lambda> \\(.*{HERE}:[0-9]+\\).*module and name"):
        pickle.dumps(surge.compile(lambda x: x))


def stored_then_failing(x):
    return torch.cos(x) + 2


def test_a_backend_failing_on_a_stored_capture_is_announced(monkeypatch, caplog, tmp_path):
    import surge.backends as backends

    options = {"frontend_cache": True, "cache_dir": str(tmp_path)}
    x = torch.randn(3)
    same(surge.compile(stored_then_failing, backend="eager", options=options)(x), stored_then_failing(x))
    surge.reset()  # as a new process: the next call runs the capture stored on disk
    monkeypatch.setitem(backends._LOADED, "eager", lambda gm, inputs, options: exploding_backend(gm, inputs))
    monkeypatch.setattr(backends, "_BOUND", {})
    with caplog.at_level(logging.WARNING, logger="surge"):
        same(surge.compile(stored_then_failing, backend="eager", options=options)(x), stored_then_failing(x))
    assert surge.counters["frontend_disk_hits"] == 1 and surge.counters.fallbacks == 1
    [warning] = surge_warnings(caplog)
    assert "stored_then_failing" in warning and "backend exploded" in warning and "disk cache" in warning


def test_a_frame_capture_cannot_handle_warns(caplog):
    compiled = surge.compile(add_one, backend=Recorder())
    x = torch.randn(2)
    with caplog.at_level(logging.WARNING, logger="surge"), torch.inference_mode():
        same(compiled(x), x + 1)
    [warning] = surge_warnings(caplog)
    assert "add_one" in warning and "inference mode" in warning and surge.counters.fallbacks == 1


def test_a_variant_that_fails_to_compile_on_a_later_call_runs_the_graph_eagerly(caplog):
    from surge.aot import aot_compile
    from surge.aot.backend import run_graph

    def gelu_scaled(x):
        return torch.nn.functional.gelu(x) * 3

    compiled_graphs = []

    def inference_only(aten_gm, example_inputs):  # a compiler that fails on the training graphs
        if compiled_graphs:
            raise NotImplementedError("no training graphs here")
        compiled_graphs.append(aten_gm)
        return run_graph(aten_gm, example_inputs)

    gm = torch.fx.symbolic_trace(gelu_scaled)
    compiled = aot_compile(gm, [torch.randn(3)], fw_compiler=inference_only)
    x = torch.randn(3, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="surge"):
        out = compiled(x)
    torch.testing.assert_close(out, gelu_scaled(x))
    out.sum().backward()  # eager autograd: the graph ran op by op
    assert x.grad is not None and surge.counters.fallbacks == 1
    [warning] = surge_warnings(caplog)
    assert "training variant could not be compiled" in warning and "no training graphs here" in warning


def test_the_compiled_function_object_binds_as_a_method_and_inlines_into_callers():
    class Scaler:
        k = 3.0

        @surge.compile(backend=Recorder())
        def scale(self, x):
            return x * self.k

    x = torch.randn(2)
    same(Scaler().scale(x), x * 3.0)
    assert Scaler.scale.__name__ == "scale" and Scaler.scale.__wrapped__ is not None
    inner = surge.compile(add_one, backend=Recorder())
    rec = Recorder()
    same(surge.compile(lambda y: inner(y) * 2, backend=rec)(x), (x + 1) * 2)
    assert rec.ops() == ["add", "mul"]  # the compiled callee is captured into the caller's graph
