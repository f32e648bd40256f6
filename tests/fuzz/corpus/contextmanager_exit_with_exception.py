"""Calling a @contextmanager object's __exit__ with an exception throws it into the
generator; surge resumes the generator as if no exception had happened (found by
test_contextlib's test_contextmanager_non_normalised)."""
import contextlib

import torch



@contextlib.contextmanager
def converting():
    try:
        yield
    except RuntimeError:
        raise KeyError("converted")


def f(x, n):
    ctx = converting()
    ctx.__enter__()
    ctx.__exit__(RuntimeError, None, None)
    return x + n


MUTATIONS = []
N_VALUES = [1]
