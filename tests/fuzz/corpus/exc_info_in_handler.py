"""sys.exc_info() inside an ``except`` block names the exception being handled;
under surge it is (None, None, None) (found by
test_generators.ExceptionTest.test_except_next)."""
import sys

import torch



def f(x, n):
    try:
        if n > 0:
            raise KeyError(n)
        kind = "none"
    except KeyError:
        kind = sys.exc_info()[0].__name__
    return x + n, kind


MUTATIONS = []
N_VALUES = [1]
