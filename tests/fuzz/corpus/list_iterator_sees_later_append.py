"""A list iterator made before the list grows yields the new items in CPython;
surge materialises iterators when they are made (found by
test_list.ListTest.test_exhausted_iterator)."""
import torch



def f(x, n):
    items = [n, 1]
    it = iter(items)
    first = next(it)
    items.append(5)
    return x + first, list(it)


MUTATIONS = []
N_VALUES = [1]
