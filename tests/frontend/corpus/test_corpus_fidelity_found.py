"""Structure checks for bugs found by the CPython-suite runner (tests/pysuite) and
the fuzzer (tests/fuzz); their value checks are programs in tests/fuzz/corpus."""
import decimal
import sys

import surge
from corpus_harness import CounterDelta, RecordingBackend, compare_call, randn


class Holder:
    pass


HOLDER = Holder()
HOLDER.items = {0, "zero", decimal.Decimal("1.5")}  # a set capture cannot wrap (an element hashed by C code)


def set_that_cannot_be_wrapped(x):
    result = HOLDER.items & set()
    return x + len(result)


def test_value_no_capture_can_wrap_breaks_once_then_runs_eagerly():
    # It used to reach every resume function as an argument and split it again,
    # 120 resume functions deep (seconds for one call; test_set's timeouts).
    compiled = surge.compile(set_that_cannot_be_wrapped, backend=RecordingBackend())
    delta = CounterDelta()
    for _ in range(2):
        compare_call(compiled, set_that_cannot_be_wrapped, randn(3))
    assert delta["graph_breaks"] == 1 and delta["fallbacks"] == 1 and delta["frames"] == 2, delta



CALLS = []


def counted_len(value, _len=len, _caller=sys._getframe):
    # Calls from a cache entry's generated code only: a backend's own runtime (the
    # Triton interpreter, say) is library code that may call whatever builtins it finds.
    if _caller(1).f_code.co_filename.startswith("<surge_entry"):
        CALLS.append(1)
    return _len(value)


def measures(x, items):
    return x * len(items)


def test_guards_do_not_call_a_builtin_the_program_rebound(monkeypatch):
    # The guards of a cache entry check len(args) and the length of list inputs: with a
    # program's own len in builtins (test_functools puts an lru_cache of it there),
    # every cache hit called it, and one that fails on a dict broke the call. The
    # program's own len(items) ran at capture (a guarded list's length is folded).
    import builtins

    compiled = surge.compile(measures, backend=RecordingBackend())
    compare_call(compiled, measures, (randn(3), [1, 2]))
    delta = CounterDelta()
    monkeypatch.setattr(builtins, "len", counted_len)
    CALLS.clear()
    compiled(randn(3), [1, 2])
    calls = CALLS.__len__()  # (len itself would count)
    monkeypatch.undo()
    assert calls == 0 and delta["cache_hits"] == 1, (calls, delta)
