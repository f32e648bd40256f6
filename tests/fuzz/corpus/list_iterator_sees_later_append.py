"""A list iterator made before the list grows yields the new items in CPython;
surge materialises iterators when they are made (found by
test_list.ListTest.test_exhausted_iterator)."""
import torch

XFAIL = "iter(list) copies the list's items when it is made; later appends are not seen"


def f(x, n):
    items = [n, 1]
    it = iter(items)
    first = next(it)
    items.append(5)
    return x + first, list(it)


MUTATIONS = []
N_VALUES = [1]
