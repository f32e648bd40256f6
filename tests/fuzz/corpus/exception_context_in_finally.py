"""An exception raised in a ``finally`` block while another is propagating has that
one as its __context__; under surge __context__ is None (found by
test_exceptions.ExceptionTests.test_context_of_exception_in_try_and_finally)."""
import torch

def f(x, n):
    try:
        try:
            raise TypeError(n)
        finally:
            raise ValueError(n + 1)
    except ValueError as e:
        context = type(e.__context__).__name__
    return x + n, context


MUTATIONS = []
N_VALUES = [1]
