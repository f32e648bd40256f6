"""Differences between surge and eager that the CPython suite finds today, with their cause.

module -> {(Class.method, variant): cause}. Each is a surge bug, most with a
program in tests/fuzz/corpus (a strict xfail); fix it, then take it off this list.
The CI sample (test_pysuite_sample.py) checks its modules against this table; the
other modules' entries record what a full run (`python -m tests.pysuite MODULE`)
finds, measured on Python 3.11.
"""

_ITERATOR_PICKLE = "__reduce__/__setstate__ of list iterators and reversed() are not modelled"
_LRU_PURE = ("functools.lru_cache wrappers are traced through as pure functions, as torch.compile does: the cache's "
             "statistics, its hashing of the arguments and the body's side effects on a hit differ from eager")

DIFFERENCES: dict[str, dict[tuple[str, str], str]] = {
    "test_list": {
        ("ListTest.test_equal_operator_modifying_operand", "plain"):
            "list == list whose items' __eq__ empties the lists: CPython re-checks the lengths",
        ("ListTest.test_iterator_pickle", "plain"): _ITERATOR_PICKLE,
        ("ListTest.test_reversed_pickle", "plain"): _ITERATOR_PICKLE,
    },
    "test_iter": {
        ("TestCase.test_ref_counting_behavior", "plain"): "reference counts (sys.getrefcount) of objects the trace holds",
    },
    "test_dict": {
        ("DictTest.test_merge_and_mutate", "plain"): "dict.update from a dict whose keys' __eq__ mutates it",
        ("DictTest.test_oob_indexing_dictiter_iternextitem", "plain"):
            "a value's __del__ clears the dict when an item assignment frees it: surge replays the "
            "assignment after the loop, so the finalizer runs too late for the iterator to see it",
    },
    "test_itertools": {
        ("TestBasicOps.test_chain_setstate", "plain"): "itertools.chain.__setstate__ is not modelled",
    },
    "test_functools": {
        ("TestLRUC.test_lru_hash_only_once", "plain"): _LRU_PURE,
        ("TestLRUC.test_lru_method", "plain"): _LRU_PURE,
        ("TestLRUC.test_lru_reentrancy_with_len", "plain"): _LRU_PURE,
        ("TestLRUPy.test_lru_hash_only_once", "plain"): _LRU_PURE,
        ("TestLRUPy.test_lru_method", "plain"): _LRU_PURE,
        ("TestLRUPy.test_lru_reentrancy_with_len", "plain"): _LRU_PURE,
        ("TestPartialC.test_nested_optimization", "plain"): ("the test's partial is a freshly imported _functools.partial, another class than functools.partial, "
                                                     "which surge does not model (functools.partial itself is flattened)"),
    },
}
