"""``getattr(Config(), "scale", 0)`` on an object built in the frame, after its class
gains ``__getattr__`` between calls: the capture had found the attribute missing
without guarding that the class had no ``__getattr__``, and objects built in the
frame never called one (a stale-cache probe of the class guards)."""
import torch


class Config:
    pass


def f(x, n):
    return x * n, getattr(Config(), "scale", 0), hasattr(Config(), "scale")


MUTATIONS = ["Config.__getattr__ = lambda self, name: 3"]
N_VALUES = [1, 2]
