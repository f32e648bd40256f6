"""A class that gains ``__bool__``, ``__len__`` or ``__eq__`` between calls, after the
capture found it absent (an object's truth was True, ``==`` was identity): the
compiled function kept the old answer, since only what a lookup found was guarded,
never that it found nothing (``python -m tests.fuzz --classes``)."""
import torch


class Flag:
    def __init__(self, v):
        self.v = v


FLAG = Flag(1)


def f(x, n):
    a = x + 1 if FLAG else x - 1
    b = int(bool(Flag(n)))
    c = int(FLAG == Flag(1))
    return a, b, c, [FLAG].count(Flag(1))


MUTATIONS = [
    "Flag.__bool__ = lambda self: False",
    "Flag.__len__ = lambda self: 0",
    "Flag.__eq__ = lambda self, other: True",
]
N_VALUES = [1, 2]
