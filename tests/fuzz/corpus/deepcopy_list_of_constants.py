"""copy.deepcopy of a list of constants returned the list itself (found by
test_slice.SliceTest.test_deepcopy: a slice of lists)."""
import copy

import torch


def f(x, n):
    nested = [[n, 1], (2, [3])]
    copied = copy.deepcopy(nested)
    bounds = slice([n], [2])
    copied_slice = copy.deepcopy(bounds)
    return (copied[0] is nested[0], copied[1][1] is nested[1][1], copied == nested,
            copied_slice.start is bounds.start, x + n)


MUTATIONS = []
N_VALUES = [1, 2]
