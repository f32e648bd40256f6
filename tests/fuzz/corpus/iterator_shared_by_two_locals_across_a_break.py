"""One iterator named by two locals at a graph break must stay one object: the
resume function advanced two copies (found while checking iterators made live)."""
import torch


def f(x, n):
    it = iter([n, n + 1, n + 2, n + 3])
    alias = it
    next(it)
    print("break")
    return x + next(alias), list(it)


MUTATIONS = []
N_VALUES = [1, 5]
