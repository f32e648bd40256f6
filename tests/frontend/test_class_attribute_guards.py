"""Attributes found on a class (class attributes, methods, properties) are guarded on
the class, however the object was reached: an instance created inside the compiled
frame, ``type(obj)``, ``obj.__class__``, an input object. Changing the class between
calls recompiles; leaving it alone hits the cache."""
import torch

import surge
from frontend_helpers import compile_strict, same


def check(fn, *args, change, calls_after=2):
    """Eager and compiled agree before and after ``change()``; returns the recorder."""
    compiled, rec = compile_strict(fn)
    same(compiled(*args), fn(*args))
    same(compiled(*args), fn(*args))
    change()
    for _ in range(calls_after):
        same(compiled(*args), fn(*args))
    return rec


def test_class_attribute_of_an_instance_built_in_the_frame():
    class Klass:
        K = 2.0

        def method(self, x):
            return x * self.K

    def f(x):
        return Klass().method(x)

    rec = check(f, torch.randn(4), change=lambda: setattr(Klass, "K", -1.0))
    assert len(rec.graphs) == 2 and surge.counters["cache_hits"] == 2


def test_class_attribute_read_through_type_and_dunder_class():
    class A:
        K = 3.0

    def f(x, a):
        return x * type(a).K + x * a.__class__.K

    rec = check(f, torch.randn(4), A(), change=lambda: setattr(A, "K", 5.0))
    assert len(rec.graphs) == 2


def test_method_replaced_on_the_class_and_inherited_method_overridden():
    class Base:
        def m(self, x):
            return x + 1

    class Child(Base):
        pass

    def f(x):
        return Child().m(x)

    x = torch.randn(4)
    rec = check(f, x, change=lambda: setattr(Base, "m", lambda self, x: x - 1))
    check(f, x, change=lambda: setattr(Child, "m", lambda self, x: x * 3))
    assert len(rec.graphs) == 2


def test_method_of_an_input_object_shadowed_by_an_instance_attribute():
    class Obj:
        def m(self, x):
            return x + 1

    def f(x, o):
        return o.m(x)

    o = Obj()
    rec = check(f, torch.randn(4), o, change=lambda: setattr(o, "m", lambda x: x * 10))
    assert len(rec.graphs) == 2


def test_class_attribute_shadowed_later_by_an_instance_attribute():
    class B:
        K = 3.0

    def f(x, b):
        return x * b.K

    b = B()
    check(f, torch.randn(4), b, change=lambda: setattr(b, "K", 7.0))


def test_class_level_dict_mutated_between_calls():
    class D:
        table = {"a": 1.0}

        def m(self, x):
            return x * self.table["a"]

    def f(x):
        return D().m(x)

    check(f, torch.randn(4), change=lambda: D.table.__setitem__("a", 9.0))


def test_property_and_classmethod_replaced_on_the_class():
    class P:
        @property
        def scale(self):
            return 2.0

        @classmethod
        def offset(cls):
            return 1.0

    def f(x):
        p = P()
        return x * p.scale + p.offset()

    x = torch.randn(4)
    check(f, x, change=lambda: setattr(P, "scale", property(lambda self: -4.0)))
    check(f, x, change=lambda: setattr(P, "offset", classmethod(lambda cls: 5.0)))


def test_init_replaced_on_the_class():
    class C:
        def __init__(self):
            self.k = 2.0

    def f(x):
        return x * C().k

    def new_init(self):
        self.k = -3.0

    check(f, torch.randn(4), change=lambda: setattr(C, "__init__", new_init))


def test_default_backend_sees_a_class_attribute_change():
    class Klass:
        K = 2.0

        def method(self, x):
            return torch.relu(x) * self.K

    def f(x):
        return Klass().method(x)

    compiled = surge.compile(f)
    x = torch.randn(8)
    same(compiled(x), f(x))
    Klass.K = -1.0
    same(compiled(x), f(x))
    assert surge.counters["recompiles"] == 1


def test_absence_of_a_class_attribute_on_an_instance_built_in_the_frame():
    class Plain:
        pass

    def f(x):
        o = Plain()
        return x + (1 if hasattr(o, "extra") else 0) + getattr(o, "bonus", 0)

    def add_attributes():
        Plain.extra, Plain.bonus = True, 5

    rec = check(f, torch.zeros(1), change=add_attributes)
    assert len(rec.graphs) == 2
