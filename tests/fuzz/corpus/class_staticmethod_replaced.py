"""A static method, class method or function replaced on a class between calls and
read through the class (``Box.twice(x)``): the compiled function kept calling the
old one, since only plain class attributes were guarded (found by the fuzzer, seed
1 programs 50 and 94)."""
import torch


class Box:
    k = 2

    @staticmethod
    def twice(v):
        return v * 2

    @classmethod
    def make(cls, v):
        return v + cls.k

    def plain(v):
        return v - 1


def f(x, n):
    return Box.twice(x) + Box.make(n) + Box.plain(n)


MUTATIONS = [
    "Box.twice = staticmethod(lambda v: v * 3)",
    "Box.make = classmethod(lambda cls, v: v * 10)",
    "Box.plain = lambda v: v + 100",
]
N_VALUES = [1, 2]
