"""Exception objects, sys.exc_info(), context managers and torch errors caught by the
user, compared with eager on fresh inputs; what is captured without a break is checked
with fullgraph=True (one graph)."""
import contextlib
import sys

import pytest
import torch

import surge
from frontend_helpers import check_outcome, compile_strict, same


def outcome(fn, *args):
    try:
        return ("returned", fn(*args))
    except Exception as e:
        return ("raised", type(e), e.args, str(e), repr(e.__context__), e.__suppress_context__)


def check(fn, *args):
    return check_outcome(fn, outcome, *args)


def one_graph(fn, *args):
    """Captured whole: fullgraph=True, one graph, eager's result."""
    compiled, rec = compile_strict(fn, fullgraph=True)
    same(compiled(*args), fn(*args))
    assert len(rec.graphs) == 1


# ---- exception objects -------------------------------------------------------

class Coded(Exception):
    def __init__(self, message, code=0):
        super().__init__(message)
        self.code = code


class Pair(Exception):
    def __init__(self, a, b):
        super().__init__(a)
        self.b = b

    def __str__(self):
        return f"Pair({self.args[0]}, {self.b})"


class Plain(Exception):
    pass


def custom_init_and_keywords(x):
    try:
        raise Coded("bad", code=3)
    except Coded as e:
        return x + e.code, str(e), repr(e), e.args


def custom_str(x):
    try:
        raise Pair(1, 2)
    except Pair as e:
        return x * e.b, str(e), e.args


def attributes_set_in_the_handler(x):
    try:
        raise ValueError("a", 2)
    except ValueError as e:
        e.extra = 5
        return x + e.extra, e.args, str(e), repr(e)


def builtin_fields(x):
    return (x + 1, ImportError("missing", name="mod").name, StopIteration(4).value, repr(ValueError(1, 2)),
            repr(ValueError()), str(KeyError("k")))


def keywords_refused(x):
    try:
        Plain("a", k=1)
    except TypeError as e:
        return x + 1, str(e)


def generator_return_value(x):
    def g():
        yield 1
        return 5
    it = g()
    next(it)
    try:
        next(it)
    except StopIteration as e:
        first = e.value
    try:
        next(it)
    except StopIteration as e:
        again = e.value
    return x + first, again


def sequence_errors(x):
    seq, pair, out = [1, 2], (1,), []
    for index in (5, -4, "a"):
        for container in (seq, pair):
            try:
                container[index]
            except (IndexError, TypeError) as e:
                out.append((type(e).__name__, str(e)))
    try:
        1 + "a"
    except TypeError as e:
        out.append(str(e))
    return x + 1, out


def exc_info_in_handlers(x):
    def helper():
        return sys.exc_info()[1].args
    try:
        raise KeyError("outer")
    except KeyError:
        try:
            raise ValueError("inner")
        except ValueError:
            inner = sys.exc_info()[0].__name__, sys.exception().args
        outer = sys.exc_info()[0].__name__, helper()
    return x + 1, inner, outer


@pytest.mark.parametrize("fn", [custom_init_and_keywords, custom_str, attributes_set_in_the_handler,
                                builtin_fields, keywords_refused, generator_return_value, sequence_errors,
                                exc_info_in_handlers])
def test_exception_objects_are_captured_as_eager_builds_them(fn):
    one_graph(fn, torch.randn(3))


def escapes_with_attributes(x):
    y = x + 1
    raise Coded("escapes", code=y.shape[0])


def kept_across_a_break(x):
    try:
        raise Coded("kept", code=7)
    except Coded as e:
        saved = e
    print("break")
    return x + saved.code, saved.args, str(saved)


@pytest.mark.parametrize("fn", [escapes_with_attributes, kept_across_a_break])
def test_exception_with_attributes_rebuilt_for_cpython(fn, capsys):
    check(fn, torch.randn(3))


def exc_info_outside_any_handler(x):
    return x + 1, sys.exc_info()


def test_exc_info_outside_the_traces_handlers_is_left_to_cpython():
    compiled = surge.compile(exc_info_outside_any_handler, backend="eager")
    try:
        raise KeyError("callers")
    except KeyError:
        eager, ours = exc_info_outside_any_handler(torch.ones(1)), compiled(torch.ones(1))
    assert ours[1][0] is KeyError and ours[1][1] is eager[1][1]


def test_generator_keeps_its_own_handled_exception():
    def f(x):
        log = []

        def gen():
            try:
                yield
                raise TypeError()
            except TypeError as exc:
                log.append(type(exc.__context__))
            log.append(sys.exc_info()[0])
            yield

        g = gen()
        next(g)
        try:
            raise ValueError
        except Exception:
            next(g)
        return x + 1, log

    check(f, torch.randn(2))


# ---- context managers --------------------------------------------------------

LOG = []


@contextlib.contextmanager
def swallowing():
    try:
        LOG.append("enter")
        yield 1
    except ValueError as e:
        LOG.append(("caught", str(e)))
    finally:
        LOG.append("finally")


@contextlib.contextmanager
def passing():
    try:
        yield 1
    finally:
        LOG.append("finally")


@contextlib.contextmanager
def converting():
    try:
        yield
    except RuntimeError:
        raise KeyError("converted")


class Manager:
    def __init__(self, swallow):
        self.swallow = swallow

    def __enter__(self):
        LOG.append("in")
        return self

    def __exit__(self, exc_type, exc, tb):
        LOG.append(("out", exc_type.__name__ if exc_type else None, str(exc) if exc else None))
        return self.swallow


class Decorating(contextlib.ContextDecorator):
    def __enter__(self):
        LOG.append("in")
        return self

    def __exit__(self, *exc):
        LOG.append("out")
        return False


@Decorating()
def decorated(v):
    LOG.append("body")
    return v * 2


def contextmanager_swallows(x):
    LOG.clear()
    with swallowing() as v:
        y = x + v
        raise ValueError("a")
    return y * 2, list(LOG)


def contextmanager_lets_it_pass(x):
    LOG.clear()
    try:
        with passing():
            y = x + 1
            raise ValueError("b")
    except ValueError as e:
        return y, str(e), list(LOG)


def contextmanager_converts(x):
    try:
        with converting():
            raise RuntimeError("r")
    except KeyError as e:
        return x + 1, e.args, repr(e.__context__)


def exit_called_by_hand(x):
    manager = converting()
    manager.__enter__()
    try:
        manager.__exit__(RuntimeError, None, None)
    except KeyError as e:
        return x + 1, e.args
    return x


def class_managers(x):
    LOG.clear()
    with Manager(True):
        y = x.sin()
        raise KeyError("k")
    try:
        with Manager(False):
            raise KeyError("k2")
    except KeyError:
        LOG.append("outer")
    return y, list(LOG)


def context_decorator(x):
    LOG.clear()
    y = decorated(x)
    with Decorating():
        y = y + 1
    return y, list(LOG)


def suppress_and_nullcontext(x):
    with contextlib.suppress(KeyError, IndexError):
        y = x + 1
        [][0]
    try:
        with contextlib.nullcontext(y) as z:
            raise ValueError("n")
    except ValueError:
        z = z * 2
    try:
        with torch.no_grad():
            w = z * 3
            raise ValueError("g")
    except ValueError:
        pass
    return w, torch.is_grad_enabled()


def exit_stack(x):
    LOG.clear()
    with contextlib.ExitStack() as stack:
        stack.callback(LOG.append, "callback")
        v = stack.enter_context(swallowing())
        y = x + v
        raise ValueError("in block")
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(passing())
            stack.enter_context(Manager(False))
            raise KeyError("k")
    except KeyError:
        LOG.append("outer")
    stack = contextlib.ExitStack()
    stack.callback(LOG.append, "closed")
    stack.close()
    return y, list(LOG)


def generator_methods(x):
    log = []

    def g():
        try:
            v = yield 1
            log.append(v)
            try:
                yield v * 2
            except ValueError:
                yield -1
        finally:
            log.append("closed")
    it = g()
    a, b = next(it), it.send(5)
    c = it.throw(ValueError("t"))
    it.close()
    return x + a + b + c, log, list(it)


@pytest.mark.parametrize("fn", [contextmanager_swallows, contextmanager_lets_it_pass, contextmanager_converts,
                                exit_called_by_hand, class_managers, context_decorator, suppress_and_nullcontext,
                                exit_stack, generator_methods])
def test_context_managers_see_the_exception_as_eager(fn):
    one_graph(fn, torch.randn(3))


def test_break_inside_an_exit_stack_runs_it_in_cpython(capsys):
    def f(x):
        LOG.clear()
        with contextlib.ExitStack() as stack:
            stack.callback(LOG.append, "callback")
            y = x + 1
            print("mid")
        return y * 2, list(LOG)

    check(f, torch.randn(3))


# ---- torch errors caught by the user ------------------------------------------

NOT_POSITIVE_DEFINITE = -torch.eye(2)


def cholesky_caught(x):
    y = x.sin()
    try:
        z = torch.linalg.cholesky(NOT_POSITIVE_DEFINITE)
    except RuntimeError:
        z = y + 1
    return z.cos()


def index_out_of_range_caught(x):
    try:
        y = x.index_select(0, torch.tensor([5]))
    except IndexError:
        y = x * 0
    try:
        z = x[torch.tensor([7])]
    except IndexError:
        z = x * 3
    return y + z


def _sample(x):
    return torch.multinomial(torch.tensor([-1.0, 1.0]), 1).float() + x.sum()


def error_in_a_helper_caught(x):
    try:
        y = _sample(x)
    except RuntimeError:
        y = x * 5
    return y


def shape_mismatch_caught(x):
    try:
        y = x + torch.ones(5)
    except RuntimeError:
        y = x * 2
    return y


@pytest.mark.parametrize("fn", [cholesky_caught, index_out_of_range_caught, error_in_a_helper_caught,
                                shape_mismatch_caught])
def test_torch_error_caught_by_the_user_as_in_eager(fn):
    before = surge.counters["graph_breaks"]
    check(fn, torch.randn(3))
    assert surge.counters["graph_breaks"] > before  # CPython runs the op inside the user's try


def test_value_checked_op_under_a_finally_inside_an_outer_except_breaks():
    def inner(x):
        try:
            return x.index_select(0, torch.tensor([9]))
        finally:
            LOG.append("inner finally")

    def f(x):
        LOG.clear()
        try:
            y = inner(x)
        except IndexError:
            y = x * 4
        return y, list(LOG)

    before = surge.counters["graph_breaks"]
    check(f, torch.randn(3))
    assert surge.counters["graph_breaks"] > before


def test_value_checked_ops_outside_a_catching_try_stay_in_the_graph():
    def f(x):
        with torch.no_grad():
            y = x.index_select(0, torch.tensor([1]))
        try:
            raise KeyError
        except KeyError:
            z = x.index_select(0, torch.tensor([0]))  # the handler's own cleanup catches nothing
        try:
            w = x.index_select(0, torch.tensor([2]))  # a finally re-raises: the error ends the call anyway
        finally:
            LOG.append("finally")
        return y + z + w

    one_graph(f, torch.randn(3))
