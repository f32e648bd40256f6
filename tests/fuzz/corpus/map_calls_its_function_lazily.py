"""map() calls its function when the iterator is advanced, not when it is made;
surge calls it for every item at once, so side effects run early and in another
order (found while reducing test_list's iterator tests)."""
import torch


LOG = []


def record(v):
    LOG.append(v)
    return v * 2


def f(x, n):
    doubled = map(record, [n, n + 1])
    LOG.append("made")
    first = next(doubled)
    return x * first


MUTATIONS = ["LOG.clear()"]
N_VALUES = [1]
