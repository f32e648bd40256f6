"""dict.copy() and copy.deepcopy() of a defaultdict made in the frame lost its
default_factory (found by test_defaultdict.TestDefaultDict.test_copy and
test_deep_copy)."""
import collections
import copy

import torch


def f(x, n):
    groups = collections.defaultdict(list)
    groups["a"].append(n)
    shallow = groups.copy()
    deep = copy.deepcopy(groups)
    shallow["b"].append(1)
    deep["c"].append(2)
    return x + n, shallow.default_factory is list, deep.default_factory is list, shallow, deep


MUTATIONS = []
N_VALUES = [1]
