"""A @contextmanager block inside an ``except`` handler whose body breaks (a print)
and then reads the handled exception: a split where the context manager is made
would run the rest of the handler with no exception being handled; the frame is
split at the raise instead (found by test_exceptions.ExceptionTests.test_unhandled,
which calls sys.__excepthook__(*sys.exc_info()) inside captured_stderr())."""
import contextlib
import sys

import torch


@contextlib.contextmanager
def noted():
    yield


def describe():
    kind, value, _ = sys.exc_info()
    return f"{kind.__name__}: {value}"


def f(x, n):
    try:
        raise KeyError(n)
    except KeyError:
        with noted():
            print("handling")
            kind = describe()
    return x + n, kind


MUTATIONS = []
N_VALUES = [1]
