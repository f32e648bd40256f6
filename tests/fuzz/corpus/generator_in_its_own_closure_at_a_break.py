"""A generator that its own body reads through a closure cell, alive at a graph
break: rebuilding it for CPython named it inside its own expression
(UnboundLocalError); it cannot be handed over, so the frame runs eagerly (found by
test_generators.YieldFromTests.test_generator_gi_yieldfrom)."""
import torch


def f(x, n):
    def g():
        yield gen is not None
        yield n

    gen = g()
    print("break")
    return x + n, list(gen)


MUTATIONS = []
N_VALUES = [1]
