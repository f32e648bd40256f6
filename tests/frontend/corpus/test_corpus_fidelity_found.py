"""Structure checks for bugs found by the CPython-suite runner (tests/pysuite) and
the fuzzer (tests/fuzz); their value checks are programs in tests/fuzz/corpus."""
import operator

import torch

import surge
from corpus_harness import CounterDelta, RecordingBackend, compare_call, randn


class Holder:
    pass


HOLDER = Holder()
HOLDER.items = {0, "zero", operator.add}  # a set capture cannot wrap (non-constant elements)


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

