"""Found by python -m tests.fuzz --seed 1 --start 50 --count 1.
call after mutation 'Box.twice = staticmethod(lambda v: v * 3)': result differs: result[1][2]: tensor([2., 2., 2.]) != tensor([3., 3., 3.])"""
import torch
G = 2
G2 = 0
class Clamp:
    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi
    def __set_name__(self, owner, name):
        self.slot = '_' + name
    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return getattr(obj, self.slot, self.lo)
    def __set__(self, obj, value):
        setattr(obj, self.slot, max(self.lo, min(self.hi, value)))
class Box:
    k = 2
    level = Clamp(0, 5)
    def __init__(self, a):
        self.a = a
        self.hits = 0
    @property
    def double(self):
        return self.a * 2 * Box.k
    @property
    def tracked(self):
        self.hits += 1
        return self.a
    def scaled(self, v):
        return v * self.k + self.a
    @classmethod
    def make(cls, a):
        return cls(a + cls.k)
    @staticmethod
    def twice(v):
        return v * 2
OBJ = Box(3)


def f(x, n):
    global G2
    i0, i1, i2 = n, n + 1, 2
    t0, t1, t2 = x, x * 2, torch.ones(3)
    lst = [n, 1, 2]
    d = {"a": n}
    t2 = Box.twice(torch.cat([t2, t0])[:3])
    return t0, t1, t2, i0, i1, i2, lst, d


MUTATIONS = ['Box.twice = staticmethod(lambda v: v * 3)']
N_VALUES = [4]
BACKEND = 'eager'
