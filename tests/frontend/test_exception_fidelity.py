"""Exceptions in compiled code are raised, re-raised, chained and caught as eager
Python does: try/finally and bare ``raise`` re-raise the original exception (also
across a graph break inside a handler), ``raise X from Y`` keeps ``__cause__``,
``__context__`` and ``__suppress_context__``, ``zip(strict=True)`` raises."""
import traceback
import types

import pytest
import torch

import surge
from frontend_helpers import check_outcome, compile_strict, same


def outcome(fn, *args):
    """What a call returns, or the exception it raises with its chain."""
    try:
        return ("returned", fn(*args))
    except Exception as e:
        return ("raised", type(e), e.args, repr(e.__cause__), repr(e.__context__), e.__suppress_context__)


def check(fn, *args):
    return check_outcome(fn, outcome, *args)


LOG = []


def finally_reraises(x):
    try:
        x = x + 1
        raise ValueError("boom")
    finally:
        LOG.append("finally")


def bare_raise_after_a_nested_handler(x):
    try:
        raise ValueError("a")
    except ValueError:
        try:
            raise TypeError("b")
        except TypeError:
            x = x + 1
        raise


def bare_raise_after_a_break_in_the_handler(x):
    try:
        raise KeyError("k")
    except KeyError:
        print("in handler")
        x = x + 1
        raise


def _reraise_helper():
    raise


def bare_raise_in_a_helper_called_by_the_handler(x):
    try:
        try:
            raise KeyError("k")
        except KeyError:
            _reraise_helper()
    except KeyError as e:
        return x + 1, e.args


def finally_with_a_return_value(x):
    try:
        y = x * 2
        if x.shape[0] > 2:
            raise KeyError("big")
        return y
    finally:
        LOG.append(x.shape[0])


@pytest.mark.parametrize("fn", [finally_reraises, bare_raise_after_a_nested_handler,
                                bare_raise_after_a_break_in_the_handler,
                                bare_raise_in_a_helper_called_by_the_handler, finally_with_a_return_value])
def test_reraise_matches_eager(fn, capsys):
    LOG.clear()
    for n in (2, 4):
        result = check(fn, torch.randn(n))
        assert result[0] == "raised" or fn is not finally_reraises
    assert LOG.count("finally") == (6 if fn is finally_reraises else 0)
    assert "No active exception" not in capsys.readouterr().err


def test_bare_raise_of_a_caught_exception_stays_in_the_graph():
    def f(x):
        try:
            try:
                raise KeyError("k")
            except KeyError:
                raise
        except KeyError:
            return x + 1

    compiled, rec = compile_strict(f, fullgraph=True)
    x = torch.randn(3)
    same(compiled(x), f(x))
    assert len(rec.graphs) == 1


def raise_from(x):
    try:
        try:
            raise KeyError("inner")
        except KeyError as e:
            raise ValueError("outer") from e
    except ValueError as v:
        return x + 1, type(v.__cause__).__name__, v.__cause__.args, v.__suppress_context__, type(v.__context__).__name__


def raise_from_none(x):
    try:
        try:
            raise KeyError("inner")
        except KeyError:
            raise ValueError("outer") from None
    except ValueError as v:
        return x + 1, v.__cause__, v.__suppress_context__, type(v.__context__).__name__


def implicit_context(x):
    try:
        try:
            raise KeyError("inner")
        except KeyError:
            raise ValueError("outer")
    except ValueError as v:
        return x + 1, v.__cause__, v.__suppress_context__, v.__context__.args


def escapes_with_its_cause(x):
    x = x + 1
    try:
        raise KeyError("inner")
    except KeyError as e:
        raise ValueError("escapes") from e


def kept_across_a_break(x):
    saved = None
    try:
        try:
            raise KeyError("inner")
        except KeyError as e:
            raise ValueError("outer") from e
    except ValueError as v:
        saved = v
    print("break")
    return x + 1, repr(saved.__cause__), repr(saved.__context__), saved.__suppress_context__


@pytest.mark.parametrize("fn", [raise_from, raise_from_none, implicit_context, escapes_with_its_cause,
                                kept_across_a_break])
def test_exception_chain_matches_eager(fn, capsys):
    check(fn, torch.randn(3))


def test_exception_chain_is_captured_without_a_break():
    compiled, rec = compile_strict(raise_from, fullgraph=True)
    x = torch.randn(3)
    same(compiled(x), raise_from(x))
    assert len(rec.graphs) == 1


def zip_strict(x, a, b):
    out = x
    for p, q in zip(a, b, strict=True):
        out = out + p * q
    return out


def zip_strict_caught(x, a, b):
    try:
        return list(zip(a, b, strict=True)), x
    except ValueError as e:
        return e.args, x + 1


@pytest.mark.parametrize("a,b", [([1, 2], [3]), ([1], [3, 4]), ([1, 2], [3, 4])])
def test_zip_strict_raises_on_unequal_lengths(a, b):
    x = torch.randn(2)
    check(zip_strict, x, a, b)
    check(zip_strict_caught, x, a, b)


def test_bare_raise_of_the_callers_exception():
    def reraise(x):
        y = x + 1
        raise

    compiled = surge.compile(reraise, backend="eager")
    for impl in (reraise, compiled, compiled):
        try:
            try:
                raise KeyError("outer")
            except KeyError:
                impl(torch.randn(2))
        except KeyError as e:
            assert e.args == ("outer",)
        else:
            raise AssertionError("no exception")


def test_a_key_error_of_a_lookup_carries_the_key():
    def f(x, d):
        try:
            return d["missing"]
        except KeyError as e:
            try:
                {}.pop(3)
            except KeyError as inner:
                return x + 1, e.args, inner.args, inner.__context__.args

    compiled, rec = compile_strict(f, fullgraph=True)
    x = torch.randn(2)
    same(compiled(x, {"a": 1}), f(x, {"a": 1}))
    assert len(rec.graphs) == 1


class _KeepsTraceback:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.seen = (type(tb) is types.TracebackType, tb is exc.__traceback__, tb.tb_lineno - _raises_in_with_line,
                     traceback.extract_tb(tb)[-1].name)
        return True


def _raises_in_with(x):
    keeper = _KeepsTraceback()
    with keeper:
        y = x + 1
        raise ValueError("swallowed")
    return y, keeper.seen


_raises_in_with_line = _raises_in_with.__code__.co_firstlineno


def test_exit_receives_the_real_traceback_of_the_users_frame():
    compiled, _ = compile_strict(_raises_in_with)
    for _ in range(2):
        x = torch.randn(2)
        same(compiled(x), _raises_in_with(x))
    assert compiled(x)[1] == (True, True, 4, "_raises_in_with")


def _raises_in_exits(x, clear):
    import contextlib

    @contextlib.contextmanager
    def raising(exc_type, clear_context):
        try:
            yield
        except BaseException:
            exc = exc_type()
            try:
                raise exc
            finally:
                if clear_context:
                    exc.__context__ = None

    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(raising(KeyError, False))
            stack.enter_context(raising(ValueError, clear))
            raise IndexError()
    except KeyError as e:
        inner = e.__context__
        return x + 1, type(inner).__name__, type(inner.__context__).__name__ if inner is not None else None


@pytest.mark.parametrize("clear", [False, True])
def test_exit_stack_chains_contexts_as_exit_stack_does(clear):
    compiled, _ = compile_strict(_raises_in_exits)
    x = torch.randn(2)
    same(compiled(x, clear), _raises_in_exits(x, clear))
