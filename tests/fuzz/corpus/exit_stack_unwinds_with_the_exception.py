"""contextlib.ExitStack made in the frame: the exception leaving its block goes to
each kept exit newest first, a @contextmanager among them may swallow it, callbacks
still run (ExitStack was refused: a deque and attributes set on a function)."""
import contextlib

import torch

LOG = []


@contextlib.contextmanager
def swallowing():
    try:
        yield 1
    except ValueError:
        LOG.append("swallowed")


def f(x, n):
    LOG.clear()
    with contextlib.ExitStack() as stack:
        stack.callback(LOG.append, n)
        v = stack.enter_context(swallowing())
        y = x + v
        raise ValueError(n)
    return y, list(LOG)


MUTATIONS = []
N_VALUES = [1]
