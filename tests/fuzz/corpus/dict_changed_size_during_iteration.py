"""Adding to a dict while iterating over it raises RuntimeError in CPython; surge
iterates over a copy of the keys and finishes the loop (found by
test_dict.DictTest.test_mutating_iteration)."""
import torch



def f(x, n):
    counts = {"a": n, "b": 1}
    for key in counts:
        counts[key + "!"] = 0
    return x + len(counts)


MUTATIONS = []
N_VALUES = [1]
