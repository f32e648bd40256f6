"""CPython returns the same object for ``t * 1`` of a tuple and for copy.copy of a
slice; under surge both are new objects (found by test_list.ListTest.test_repeat
and test_slice.SliceTest.test_copy)."""
import copy

import torch



def f(x, n):
    pair = (n, 2)
    bounds = slice(n, 10)
    return x + n, pair * 1 is pair, copy.copy(bounds) is bounds


MUTATIONS = []
N_VALUES = [1]
