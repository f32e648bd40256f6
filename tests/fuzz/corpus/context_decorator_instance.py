"""An instance of a contextlib.ContextDecorator subclass defined in the frame, used
as a decorator, must enter the context around each call (found by
test_contextlib.TestContextDecorator.test_contextdecorator_as_mixin)."""
import contextlib

import torch

XFAIL = "calling a function decorated by a ContextDecorator instance does not enter the context"


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
