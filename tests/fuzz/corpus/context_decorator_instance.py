"""An instance of a contextlib.ContextDecorator subclass defined in the frame, used
as a decorator, must enter the context around each call (found by
test_contextlib.TestContextDecorator.test_contextdecorator_as_mixin). At the graph break
the object made in the frame was built twice, once for the decorator's closure cell and
once for the break state, so `__enter__` set the attribute on the other copy."""
import contextlib

import torch


def f(x, n):
    class Tracking(contextlib.ContextDecorator):
        started = False

        def __enter__(self):
            self.started = True
            return self

        def __exit__(self, *exc):
            return False

    context = Tracking()

    @context
    def inner(v):
        return v * 2 if context.started else v

    return inner(x) + n


MUTATIONS = []
N_VALUES = [1]
