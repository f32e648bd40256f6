"""The __name__ of a @contextmanager function defined in the frame is the helper's
name instead of the function's (functools.wraps; found by
test_contextlib's test_contextmanager_attribs)."""
import contextlib

import torch

def f(x, n):
    @contextlib.contextmanager
    def scaled():
        yield n

    with scaled() as k:
        y = x * k
    return y, scaled.__name__


MUTATIONS = []
N_VALUES = [2]
