"""A function that rebinds builtins.len (here to an lru_cache of it) and restores it
in ``finally``: surge's own code, capturing the frame after the break, calls the patched ``len`` (TypeError:
unhashable type 'dict'), that error reaches the user, and the ``finally`` never
runs, so builtins.len stays patched (found by
test_functools.TestLRUC.test_lru_reentrancy_with_len)."""
import builtins
import functools

import torch

XFAIL = ("surge's own modules (not its generated code, which keeps the builtins it was imported with) look "
         "builtins up as they run, inside the user's call: a patched len breaks the capture")


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
