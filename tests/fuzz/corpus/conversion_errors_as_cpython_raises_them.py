"""int() of a bad string raised ValueError with surge's own "int(): " before
CPython's message, and int(x=1.2) returned 0 instead of raising TypeError (the
keyword was dropped) (found by test_int.IntTestCases.test_keyword_args and the
fuzzer's ``int('x...')`` statements)."""
import torch


def f(x, n):
    try:
        int(f"x{n}")
    except ValueError as e:
        first = str(e)
    try:
        int(x=1.2)
        second = "no error"
    except TypeError as e:
        second = str(e)
    return x + n, first, second, int("11", base=2 + n)


MUTATIONS = []
N_VALUES = [1]
