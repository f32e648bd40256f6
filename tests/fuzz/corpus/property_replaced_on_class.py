"""A property replaced on the class between calls, read through an instance: the
compiled function keeps returning the old property's value (found by the fuzzer,
seed 0 program 243; the instance-read form of stale class attributes). Its class is not
called Box: the checker observes the prelude's Box.k, which a Box of its own would shadow."""
import torch


class Holder:
    def __init__(self, a):
        self.a = a

    @property
    def double(self):
        return self.a * 2


OBJ = Holder(3)


def f(x, n):
    return x * OBJ.double + n


MUTATIONS = ["Holder.double = property(lambda self: self.a + 1)"]
N_VALUES = [1]
