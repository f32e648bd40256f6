"""A function that rebinds builtins.len (here to an lru_cache of it) and restores it
in ``finally``: surge's own code, capturing the frame after the break, called the patched
``len`` (TypeError: unhashable type 'dict'), that error reached the user, and the
``finally`` never ran, so builtins.len stayed patched (found by
test_functools.TestLRUC.test_lru_reentrancy_with_len). Capture now runs with Python's
builtins and traces the program's."""
import builtins
import functools

import torch


def f(x, n):
    old_len = builtins.len
    try:
        builtins.len = functools.lru_cache(4)(len)
        size = len("abcdef"[:n])
    finally:
        builtins.len = old_len
    return x + size


MUTATIONS = []
N_VALUES = [2]
