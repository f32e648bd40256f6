"""A property's getter is traced like any call: what it does besides returning a
value (counters, appends, in-place tensor updates, prints) happens on every call of
the compiled function, as in eager; what cannot be replayed breaks the graph. A
``lazy_property`` caches its value on the instance, as eager does."""
import itertools

import torch
from torch.distributions.utils import lazy_property

import surge
from frontend_helpers import compile_strict, same

LOG = []
TICKS = itertools.count()


class Counted:
    reads_on_class = 0

    def __init__(self):
        self.reads = 0
        self.cache = {}
        self.buffer = torch.zeros(2)

    @property
    def scale(self):
        self.reads += 1
        self.cache["n"] = self.cache.get("n", 0) + 1
        LOG.append("scale")
        return 2.0

    @property
    def bumped(self):
        self.buffer.add_(1)
        return self.buffer

    @property
    def shown(self):
        print("getter ran")
        return 3.0

    @property
    def ticked(self):
        next(TICKS)
        type(self).reads_on_class += 1
        return 1.0


def run_both(fn, make_args, calls=3):
    """State after ``calls`` eager calls and after as many compiled ones, on fresh objects."""
    compiled = surge.compile(fn, backend="eager")
    results = []
    for impl in (fn, compiled):
        LOG.clear()
        Counted.reads_on_class = 0
        args = make_args()
        outs = [impl(*args) for _ in range(calls)]
        results.append((outs, args))
    return results


def test_getter_counters_and_appends_repeat_on_every_call():
    def f(x, o):
        return x * o.scale

    x = torch.randn(3)
    (eager_outs, (_, eager_obj)), (outs, (_, obj)) = run_both(f, lambda: (x, Counted()))
    same(outs, eager_outs)
    assert obj.reads == eager_obj.reads == 3 and obj.cache == eager_obj.cache == {"n": 3}


def test_getter_log_is_kept_for_an_object_built_in_the_frame():
    def f(x):
        o = Counted()
        return x * o.scale + x * o.scale

    compiled, rec = compile_strict(f, fullgraph=True)
    x = torch.randn(3)
    LOG.clear()
    f(x)
    expected = list(LOG)
    LOG.clear()
    same(compiled(x), f(x))
    assert LOG == expected * 2 and len(rec.graphs) == 1


def test_getter_that_prints_or_mutates_a_class_repeats_through_a_break(capsys):
    def f(x, o):
        return x * o.shown * o.ticked

    x = torch.randn(3)
    (eager_outs, (_, _)), (outs, (_, _)) = run_both(f, lambda: (x, Counted()))
    same(outs, eager_outs)
    printed = capsys.readouterr().out
    assert printed.count("getter ran") == 6
    assert surge.counters["graph_breaks"] >= 1


def test_getter_updating_a_tensor_in_place_with_the_default_backend():
    def f(x, o):
        return x + o.bumped

    compiled = surge.compile(f)
    eager_obj, obj = Counted(), Counted()
    x = torch.randn(2)
    for _ in range(3):
        same(compiled(x, obj), f(x, eager_obj))
    same(obj.buffer, eager_obj.buffer)


class LazyTable:
    def __init__(self):
        self.runs = 0

    @lazy_property
    def table(self):
        self.runs += 1
        return 3.0


def test_lazy_property_caches_on_the_instance_as_eager_does():
    def f(x, o):
        return x * o.table

    compiled, rec = compile_strict(f)
    x = torch.randn(2)
    eager_obj, obj = LazyTable(), LazyTable()
    for _ in range(3):
        same(compiled(x, obj), f(x, eager_obj))
    assert obj.runs == eager_obj.runs == 1 and obj.__dict__["table"] == 3.0
    assert len(rec.graphs) == 2 and surge.counters["cache_hits"] == 1
