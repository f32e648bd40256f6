"""``isinstance(obj, Base)`` of an input object whose class's ``__bases__`` is
reassigned between calls: the type guard (``type(obj) is Leaf``) still held, so the
old answer came back; the answer now guards the class's MRO (found by
``python -m tests.fuzz --classes``, seed 0 program 178)."""
import torch


class Base:
    pass


class Mid(Base):
    pass


class Alt:
    pass


class Leaf(Mid):
    pass


LEAF = Leaf()


def f(x, n):
    return x + n, int(isinstance(LEAF, Base)), int(issubclass(Leaf, Mid))


MUTATIONS = ["Leaf.__bases__ = (Alt,)"]
N_VALUES = [0]
