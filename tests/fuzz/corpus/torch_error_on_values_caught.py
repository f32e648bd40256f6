"""A torch op whose error depends on the tensors' values (an index out of range),
inside a ``try`` that catches it: recorded in the graph, it raised past the user's
handler when the graph ran (found while checking torch errors caught by the user)."""
import torch


def f(x, n):
    index = torch.tensor([n * 10])
    try:
        y = x.index_select(0, index)
    except IndexError:
        y = x * n
    return y


MUTATIONS = []
N_VALUES = [1, 2]
