"""A generator resumed inside the caller's handler chains its own exception to the
caller's and sees the handled exception only while it runs, also when a break hands
it to CPython: a generator named by two places at a break must be made once, and a
call that resumes it inside a handler splits at the raise (found by
test_generators.ExceptionTest.test_except_gen_except)."""
import sys

import torch


def f(x, n):
    log = []

    def gen():
        try:
            yield
            raise TypeError(n)
        except TypeError as exc:
            log.append(type(exc.__context__).__name__)
        log.append(sys.exc_info()[0].__name__)
        yield
        log.append(str(sys.exc_info()[0]))
        yield

    g = gen()
    next(g)
    try:
        raise ValueError(n)
    except Exception:
        next(g)
    print("break")
    next(g)
    return x + n, log


MUTATIONS = []
N_VALUES = [1, 2]
