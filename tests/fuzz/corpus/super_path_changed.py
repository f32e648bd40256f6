"""``super().scale(v)``, ``super().build(v)`` in a classmethod and ``super().K``: a
base's method replaced, a class between gaining the name, and ``__bases__``
reassigned between calls. The capture guarded only the class that held the value it
found (``class_entry(Base, 'scale')``), which none of these changes; now the lookup
from the ``super()`` position is guarded (``python -m tests.fuzz --classes``)."""
import torch


class Base:
    K = 1

    def scale(self, v):
        return v * 2 + self.K

    @classmethod
    def build(cls, v):
        return v + cls.K


class Mid(Base):
    pass


class Alt:
    K = 7

    def scale(self, v):
        return v - 1

    @classmethod
    def build(cls, v):
        return v * 3


class Leaf(Mid):
    def scale(self, v):
        return super().scale(v) + 1

    @classmethod
    def build(cls, v):
        return super().build(v) * 2

    def base_k(self):
        return super().K


LEAF = Leaf()


def f(x, n):
    return LEAF.scale(x), Leaf.build(n), x * LEAF.base_k()


MUTATIONS = [
    "Mid.scale = lambda self, v: v + 3",
    "Base.build = classmethod(lambda cls, v: v - 2)",
    "Mid.K = 5",
    "Leaf.__bases__ = (Alt,)",
]
N_VALUES = [1, 2]
