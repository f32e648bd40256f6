"""dict.keys() is a set-like view: ``-``, ``&``, ``|`` work on it. Under surge it is
a list and the operators raise TypeError (found by
test_dict.DictTest.test_dictview_set_operations_on_keys)."""
import torch



def f(x, n):
    small = {"a": 1, "b": n}.keys()
    large = {"a": 1, "b": 2, "c": 3}.keys()
    return x + n, sorted(large - small), sorted(small & large), sorted(small | {"z"})


MUTATIONS = []
N_VALUES = [1]
