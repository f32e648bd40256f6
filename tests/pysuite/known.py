"""Differences between surge and eager that the CPython suite finds today, with their cause.

module -> {(Class.method, variant): cause}. Each is a surge bug (or, where the cause
says so, a behaviour surge shares with torch.compile); fix it, then take it off this
list. The CI sample (test_pysuite_sample.py) checks its modules against this table;
the other modules' entries record what a full run (`python -m tests.pysuite MODULE`)
finds, measured on Python 3.11. Timeouts (a compiled test past the time limit, most
of them tests with a hundred graph breaks on a loaded machine) are speed, not listed.
"""

_DICT_ITERATOR_AT_BREAK = ("a dict iterator alive at a graph break, over a dict whose entries were deleted and "
                           "inserted again since: CPython's iterator notices the changed keys, the one made again "
                           "over the rebuilt dict (its table compacted) does not")
_FINALIZER_TIMING = ("a value's __del__ clears the dict when an item assignment frees it: the trace's store is "
                     "replayed later, so the finalizer runs too late for the iterator to see it")

DIFFERENCES: dict[str, dict[tuple[str, str], str]] = {
    "test_iter": {
        ("TestCase.test_ref_counting_behavior", "plain"): "reference counts (sys.getrefcount) of objects the trace holds",
    },
    "test_dict": {
        **{("DictTest.test_oob_indexing_dictiter_iternextitem", v): _FINALIZER_TIMING
           for v in ("plain", "graph", "tensor_int")},
        **{(f"DictTest.test_{name}", "tensor_int"): _DICT_ITERATOR_AT_BREAK
           for name in ("mutating_iteration_delete", "mutating_iteration_delete_over_items",
                        "mutating_iteration_delete_over_values")},
    },
    "test_functools": {
        ("TestPartialC.test_nested_optimization", "plain"):
            "the test's partial is a freshly imported _functools.partial, another class than functools.partial: "
            "an object of the inputs whose attributes the trace reads, which creates its __dict__ (CPython's "
            "partial() flattens only a partial without one)",
    },
}
