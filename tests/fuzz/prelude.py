"""The module-level state every generated program can use: globals, module state,
closures with cells that change, a generator, classes with a property, a
side-effecting property, a data descriptor, class methods and operators.

Each block names what it defines, so a minimised program keeps only the blocks
its function and mutations mention.
"""
from __future__ import annotations

# (names defined, source). Order matters: later blocks use earlier ones.
BLOCKS: list[tuple[tuple[str, ...], str]] = [
    (("torch",), "import torch"),
    (("sys",), "import sys"),
    (("G", "G2"), "G = 2\nG2 = 0"),
    (("STATE",), 'STATE = {"n": 1, "calls": 0}'),
    (("LOG",), "LOG = []"),
    (("W",), "W = torch.linspace(-1.0, 1.0, 3)"),
    (("helper",), "def helper(v):\n    return v * 2 + G"),
    (("gen",), "def gen(n):\n    for k in range(n):\n        yield k * G"),
    (("COUNTER",), (
        "def make_counter():\n"
        "    count = 0\n"
        "    def bump(by):\n"
        "        nonlocal count\n"
        "        count += by\n"
        "        return count\n"
        "    return bump\n"
        "COUNTER = make_counter()")),
    (("SCALE", "SET_SCALE"), (
        "def make_scaler(k):\n"
        "    def scale(v):\n"
        "        return v * k\n"
        "    def set_k(new):\n"
        "        nonlocal k\n"
        "        k = new\n"
        "    return scale, set_k\n"
        "SCALE, SET_SCALE = make_scaler(3)")),
    (("Clamp",), (
        "class Clamp:\n"
        "    def __init__(self, lo, hi):\n"
        "        self.lo, self.hi = lo, hi\n"
        "    def __set_name__(self, owner, name):\n"
        "        self.slot = '_' + name\n"
        "    def __get__(self, obj, owner=None):\n"
        "        if obj is None:\n"
        "            return self\n"
        "        return getattr(obj, self.slot, self.lo)\n"
        "    def __set__(self, obj, value):\n"
        "        setattr(obj, self.slot, max(self.lo, min(self.hi, value)))")),
    (("Box", "OBJ"), (
        "class Box:\n"
        "    k = 2\n"
        "    level = Clamp(0, 5)\n"
        "    def __init__(self, a):\n"
        "        self.a = a\n"
        "        self.hits = 0\n"
        "    @property\n"
        "    def double(self):\n"
        "        return self.a * 2 * Box.k\n"
        "    @property\n"
        "    def tracked(self):\n"
        "        self.hits += 1\n"
        "        return self.a\n"
        "    def scaled(self, v):\n"
        "        return v * self.k + self.a\n"
        "    @classmethod\n"
        "    def make(cls, a):\n"
        "        return cls(a + cls.k)\n"
        "    @staticmethod\n"
        "    def twice(v):\n"
        "        return v * 2\n"
        "OBJ = Box(3)")),
    (("Vec",), (
        "class Vec:\n"
        "    def __init__(self, x, y):\n"
        "        self.x, self.y = x, y\n"
        "    def __add__(self, other):\n"
        "        return Vec(self.x + other.x, self.y + other.y)\n"
        "    def __eq__(self, other):\n"
        "        return isinstance(other, Vec) and (self.x, self.y) == (other.x, other.y)\n"
        "    def __repr__(self):\n"
        "        return f'Vec({self.x!r}, {self.y!r})'")),
    (("FuzzError",), "class FuzzError(Exception):\n    pass"),
    (("Base", "Mid", "Alt", "Leaf", "LEAF"), (
        "class Base:\n"
        "    K = 1\n"
        "    def scale(self, v):\n"
        "        return v * 2 + self.K\n"
        "    @classmethod\n"
        "    def build(cls, v):\n"
        "        return v + cls.K\n"
        "class Mid(Base):\n"
        "    pass\n"
        "class Alt:\n"
        "    K = 7\n"
        "    def scale(self, v):\n"
        "        return v - 1\n"
        "    @classmethod\n"
        "    def build(cls, v):\n"
        "        return v * 3\n"
        "class Leaf(Mid):\n"
        "    def scale(self, v):\n"
        "        return super().scale(v) + 1\n"
        "    @classmethod\n"
        "    def build(cls, v):\n"
        "        return super().build(v) * 2\n"
        "    def base_k(self):\n"
        "        return super().K\n"
        "LEAF = Leaf()")),
    (("Flag", "FLAG"), (
        "class Flag:\n"
        "    def __init__(self, v):\n"
        "        self.v = v\n"
        "FLAG = Flag(1)")),
    (("tracked",), (
        "import contextlib\n"
        "@contextlib.contextmanager\n"
        "def tracked(tag):\n"
        "    LOG.append(('enter', tag))\n"
        "    try:\n"
        "        yield tag * 2\n"
        "    finally:\n"
        "        LOG.append(('exit', tag))")),
    (("Guard",), (
        "class Guard:\n"
        "    def __init__(self, swallow):\n"
        "        self.swallow = swallow\n"
        "    def __enter__(self):\n"
        "        LOG.append('in')\n"
        "        return self\n"
        "    def __exit__(self, kind, value, tb):\n"
        "        LOG.append(('out', kind.__name__ if kind else None))\n"
        "        return self.swallow")),
]

# Module state compared after every call (when the program defines it).
OBSERVED = ("G", "G2", "STATE", "LOG", "W", "OBJ", "Box.k")
