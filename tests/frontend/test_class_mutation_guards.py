"""Stale-cache probes for what a capture relied on about classes: a dunder it found
absent (truth, len, ==, operators), the MRO on the ``super()`` path (a base method
replaced, ``__bases__`` reassigned, a class in between gaining the name) and class
attributes read through ``super()``. Each probe compiles, calls, mutates the class,
calls again and compares with eager."""
import torch

from frontend_helpers import compile_strict, same


def probe(fn, make_args, mutate, undo=None):
    compiled, rec = compile_strict(fn)
    for _ in range(2):
        args = make_args()
        same(compiled(*args), fn(*args))
    mutate()
    try:
        for _ in range(2):
            args = make_args()
            same(compiled(*args), fn(*args))
    finally:
        if undo is not None:
            undo()
    return rec


def test_input_object_whose_class_gains_bool():
    class Flag:
        pass

    def f(x, o):
        return x + 1 if o else x - 1

    o = Flag()
    rec = probe(f, lambda: (torch.ones(2), o), lambda: setattr(Flag, "__bool__", lambda self: False))
    assert len(rec.graphs) == 2


def test_object_made_in_the_frame_whose_class_gains_len():
    class Box:
        pass

    def f(x):
        return x * 2 if Box() else x * 3

    probe(f, lambda: (torch.ones(2),), lambda: setattr(Box, "__len__", lambda self: 0))


def test_class_gains_eq_used_by_list_membership():
    class Key:
        def __init__(self, k):
            self.k = k

    def f(x, a, b):
        return x + 1 if a in [b] else x - 1

    a, b = Key(1), Key(1)
    probe(f, lambda: (torch.ones(2), a, b), lambda: setattr(Key, "__eq__", lambda s, o: s.k == o.k))


def test_class_gains_an_operator():
    class V:
        def __radd__(self, other):
            return other + 10

    def f(x, v):
        return 1 + v, x

    probe(f, lambda: (torch.ones(2), V()), lambda: setattr(V, "__add__", lambda self, o: -1))


def test_base_method_replaced_on_the_super_path():
    class Base:
        def scale(self, x):
            return x * 2

    class Child(Base):
        def scale(self, x):
            return super().scale(x) + 1

    def f(x, c):
        return c.scale(x)

    c = Child()
    rec = probe(f, lambda: (torch.ones(2), c), lambda: setattr(Base, "scale", lambda self, x: x * 5))
    assert len(rec.graphs) == 2


def test_class_between_gains_the_method_on_the_super_path():
    class Base:
        def scale(self, x):
            return x * 2

    class Middle(Base):
        pass

    class Child(Middle):
        def scale(self, x):
            return super().scale(x) + 1

    def f(x):
        return Child().scale(x)

    probe(f, lambda: (torch.ones(2),), lambda: setattr(Middle, "scale", lambda self, x: x * 7))


def test_bases_reassigned():
    class A:
        def scale(self, x):
            return x * 2

    class B:
        def scale(self, x):
            return x * 3

    class Child(A):
        def scale(self, x):
            return super().scale(x) + 1

    def f(x, c):
        return c.scale(x)

    c = Child()
    probe(f, lambda: (torch.ones(2), c), lambda: setattr(Child, "__bases__", (B,)))


def test_class_attribute_read_through_super():
    class Base:
        K = 2.0

    class Child(Base):
        K = 5.0

        def value(self, x):
            return x * super().K

    def f(x):
        return Child().value(x)

    probe(f, lambda: (torch.ones(2),), lambda: setattr(Base, "K", -3.0))


def test_class_attribute_read_through_super_shadowed_in_between():
    class Base:
        K = 2.0

    class Middle(Base):
        pass

    class Child(Middle):
        def value(self, x):
            return x * super().K

    def f(x, c):
        return c.value(x)

    c = Child()
    probe(f, lambda: (torch.ones(2), c), lambda: setattr(Middle, "K", 9.0))


def test_super_in_a_classmethod_after_a_base_classmethod_is_replaced():
    class Base:
        @classmethod
        def make(cls, x):
            return x + 1

    class Child(Base):
        @classmethod
        def make(cls, x):
            return super().make(x) * 2

    def f(x):
        return Child.make(x)

    probe(f, lambda: (torch.ones(2),), lambda: setattr(Base, "make", classmethod(lambda cls, x: x - 4)))


def test_class_gains_getattr_after_an_attribute_was_found_missing():
    class Config:
        pass

    def f(x, c):
        return x * 2 if hasattr(c, "scale") else x, getattr(Config(), "scale", 0)

    probe(f, lambda: (torch.ones(2), Config()), lambda: setattr(Config, "__getattr__", lambda self, name: 3))
