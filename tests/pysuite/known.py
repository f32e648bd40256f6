"""Differences between surge and eager that the CI sample finds today, with their cause.

module -> {(Class.method, variant): cause}. Each is a surge bug, most with a
program in tests/fuzz/corpus (a strict xfail); fix it, then take it off this list.
"""

_ITERATORS = "list iterators copy the list when made (corpus: list_iterator_sees_later_append)"

DIFFERENCES: dict[str, dict[tuple[str, str], str]] = {
    "test_list": {
        ("ListTest.test_equal_operator_modifying_operand", "plain"):
            "list == list whose items' __eq__ empties the lists: CPython re-checks the lengths",
        ("ListTest.test_exhausted_iterator", "plain"): _ITERATORS,
        ("ListTest.test_iterator_pickle", "plain"): _ITERATORS + "; __reduce__/__setstate__ of list iterators",
        ("ListTest.test_reversed_pickle", "plain"): _ITERATORS + "; __reduce__/__setstate__ of reversed()",
        ("ListTest.test_repeat", "plain"): "tuple * 1 is a new tuple, and id() of it (corpus: immutable_identity)",
    },
    "test_contextlib": {
        ("ContextManagerTestCase.test_contextmanager_non_normalised", "plain"):
            "__exit__ with an exception does not throw it into the generator "
            "(corpus: contextmanager_exit_with_exception)",
        ("TestContextDecorator.test_contextdecorator_as_mixin", "plain"):
            "a ContextDecorator instance as decorator does not enter (corpus: context_decorator_instance)",
    },
}
