"""A method of a class defined in a closure writes its ``nonlocal`` cell; after a
graph break the second call saw the cell's old value: the method, a constant the
trace guards by identity, had its cell written in the trace only, never replayed
(found by test_scope.ScopeTests.testNonLocalMethod)."""
import torch


def make(start):
    class Counter:
        def inc(self):
            nonlocal start
            start += 1
            return start
    return Counter()


def f(x, n):
    counter = make(n)
    first = counter.inc()
    print("between")
    second = counter.inc()
    return x + first, x + second


MUTATIONS = []
N_VALUES = [0, 2]
