"""ExitStack.enter_context of an object whose __enter__ is only an instance
attribute raises TypeError in CPython; under surge the break code rebuilding the
plain ``object()`` failed (it has no __dict__) and that AttributeError reached the
user (found by test_contextlib.TestExitStack.test_instance_bypass)."""
import contextlib

import torch


class Example:
    pass


def f(x, n):
    cm = Example()
    cm.__enter__ = object()
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(cm)
        except TypeError:
            n += 1
    return x + n


MUTATIONS = []
N_VALUES = [1]
