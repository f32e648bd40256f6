"""Writes to state outside the frame are replayed after the graph runs."""
import torch
import torch.nn as nn

from frontend_helpers import compile_strict, same

CALLS = 0


def counted(x):
    global CALLS
    CALLS += 1
    return x + CALLS


def test_global_store_is_replayed():
    global CALLS
    CALLS = 0
    compiled, rec = compile_strict(counted)
    x = torch.randn(2)
    for expected in (1, 2, 3):
        same(compiled(x), x + expected)
        assert CALLS == expected


def test_nonlocal_counter():
    def make():
        n = 0

        def step(x):
            nonlocal n
            n += 1
            return x * n
        return step

    step = make()
    compiled, _ = compile_strict(step)
    x = torch.randn(2)
    for expected in (1, 2, 3):
        same(compiled(x), x * expected)


def test_input_list_and_dict_mutations_reach_the_caller():
    def f(xs, d, x):
        xs.append(x * 2)
        d["y"] = x + 1
        del d["drop"]
        return len(xs)

    compiled, _ = compile_strict(f)
    xs, d, x = [torch.randn(2)], {"drop": 1, "keep": 2}, torch.randn(2)
    assert compiled(xs, d, x) == 2
    assert len(xs) == 2 and list(d) == ["keep", "y"]
    torch.testing.assert_close(xs[1], x * 2)
    torch.testing.assert_close(d["y"], x + 1)


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.steps = 0

    def forward(self, x):
        self.steps += 1
        self.last = x * 2
        return self.lin(self.last) + self.steps


def test_module_attribute_stores():
    module = Counter()
    compiled, _ = compile_strict(module)
    x = torch.randn(1, 2)
    out = compiled(x)
    assert module.steps == 1
    torch.testing.assert_close(module.last, x * 2)
    torch.testing.assert_close(out, module.lin(x * 2) + 1)
    compiled(x)
    assert module.steps == 2


def test_in_place_tensor_updates_of_inputs():
    def f(x, buf):
        buf.add_(1)
        x[0] = 0.0
        return x

    compiled, _ = compile_strict(f)
    x, buf = torch.randn(3), torch.zeros(2)
    assert compiled(x, buf) is x
    assert x[0] == 0 and torch.equal(buf, torch.ones(2))


class Box:
    pass


SAVED = None


def stores_what_it_returns(x):
    global SAVED
    box = Box()
    box.value = x + 1
    items = [x * 2]
    SAVED = (box, items)
    return box, items


def test_an_object_made_in_the_frame_stored_and_returned_is_one_object():
    global SAVED
    compiled, rec = compile_strict(stores_what_it_returns)
    for _ in range(2):
        x = torch.randn(3)
        box, items = compiled(x)
        assert SAVED[0] is box and SAVED[1] is items
        same(box.value, x + 1)
        same(items[0], x * 2)
    assert len(rec.graphs) == 1


LOG = []


class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append(func.__name__)
        return super().__torch_function__(func, types, args, kwargs or {})


def logs_through_an_override(x):
    return (x * 2).sin()


def appends_then_reads(x):
    LOG.append("call")
    return x + len(LOG), LOG


def test_a_global_log_the_frame_only_appends_to_does_not_recompile_as_it_grows():
    import surge

    LOG.clear()
    compiled, rec = compile_strict(logs_through_an_override)
    x = torch.randn(3).as_subclass(Logged)
    for calls in range(1, 5):
        same(compiled(x).as_subclass(torch.Tensor), logs_through_an_override(x).as_subclass(torch.Tensor))
        assert len(LOG) == 4 * calls and LOG[-4:] == LOG[:4]
    LOG[:] = ["cleared between calls"]
    compiled(x)
    assert LOG[0] == "cleared between calls" and len(LOG) == 3
    assert len(rec.graphs) == 1 and surge.counters["recompiles"] == 0


def test_a_global_list_appended_then_read_is_guarded_on_what_was_read():
    LOG.clear()
    compiled, _ = compile_strict(appends_then_reads)
    for _ in range(3):
        x = torch.randn(3)
        out, log = compiled(x)
        assert log is LOG
        same(out, x + len(LOG))
    assert LOG == ["call"] * 3


def _make_counter():
    count = 0

    class Counter:
        def inc(self):
            nonlocal count
            count += 1
            return count
    return Counter()


COUNTER = _make_counter()


def counts_through_a_method(x):
    return x + COUNTER.inc()


def test_a_method_writing_its_nonlocal_cell_is_replayed_every_call():
    compiled, rec = compile_strict(counts_through_a_method)
    x = torch.zeros(2)
    for expected in (1, 2, 3):
        same(compiled(x), x + expected)
    assert COUNTER.inc() == 4
