"""A collections.defaultdict made in the frame and alive at a graph break (or
returned) was rebuilt as ``defaultdict({items})``, the items passed as the factory:
TypeError('first argument must be callable or None') reached the user (found by
test_defaultdict, every test; and test_set.TestGraphs.test_cuboctahedron)."""
import collections

import torch


def f(x, n):
    groups = collections.defaultdict(list)
    groups["a"].append(n)
    plain = collections.defaultdict()
    print("a break with both alive")
    groups["b"].append(n + 1)
    plain["k"] = n
    explicit_none = collections.defaultdict(None)
    try:
        explicit_none["missing"]
    except KeyError:
        n += 1
    return x + n, groups, plain, type(groups).__name__


MUTATIONS = []
N_VALUES = [1, 2]
