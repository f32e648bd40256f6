"""Adding to a dict while iterating over it raises RuntimeError in CPython; surge
iterates over a copy of the keys and finishes the loop (found by
test_dict.DictTest.test_mutating_iteration)."""
import torch

XFAIL = "a for loop over a dict iterates a snapshot: no 'dictionary changed size' RuntimeError"


def f(x, n):
    counts = {"a": n, "b": 1}
    for key in counts:
        counts[key + "!"] = 0
    return x + len(counts)


MUTATIONS = []
N_VALUES = [1]
