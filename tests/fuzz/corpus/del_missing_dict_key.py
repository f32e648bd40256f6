"""``del d[k]`` of a missing key raises KeyError; surge ignored it (found by
test_ordered_dict's CPythonBuiltinDictTests.test_delitem)."""
import torch


def f(x, n):
    counts = {"a": n}
    try:
        del counts["k%d" % n]
        outcome = "deleted"
    except KeyError:
        outcome = "missing"
    del counts["a"]
    return x + n, outcome, counts


MUTATIONS = []
N_VALUES = [1]
