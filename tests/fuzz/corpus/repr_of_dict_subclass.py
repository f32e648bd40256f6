"""repr() and str() of a Counter or OrderedDict made in the frame gave a plain
dict's text ("{'a': 2}" for "Counter({'a': 2})"): str/repr folded the value through
DictVariable.as_constant(), which dropped the class (found by
test_collections.TestCounter.test_basics and test_ordered_dict's test_repr)."""
import collections

import torch


def f(x, n):
    counts = collections.Counter("abca"[:n + 2])
    ordered = collections.OrderedDict(a=n)
    return x + n, repr(counts), str(ordered)


MUTATIONS = []
N_VALUES = [1]
