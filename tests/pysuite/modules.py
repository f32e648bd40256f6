"""Which CPython test modules the runner covers."""

# The full run (``python -m tests.pysuite``): Python semantics a traced program uses.
FULL_MODULES = (
    "test_list", "test_dict", "test_set", "test_tuple", "test_grammar", "test_exceptions",
    "test_contextlib", "test_generators", "test_itertools", "test_functools", "test_iter",
    "test_sort", "test_math", "test_scope", "test_with", "test_unpack", "test_string",
    "test_str", "test_unicode", "test_bool", "test_int", "test_enumerate", "test_slice", "test_class",
    "test_descr", "test_property", "test_dataclasses", "test_operator", "test_augassign",
    "test_compare", "test_range", "test_userlist", "test_userdict", "test_ordered_dict",
    "test_defaultdict", "test_collections", "test_keywordonlyarg", "test_unary",
    "test_binop", "test_raise", "test_opcodes", "test_genexps", "test_listcomps",
    "test_setcomps", "test_dictcomps", "test_fstring", "test_float", "test_complex",
    "test_abc", "test_isinstance", "test_patma", "test_exception_group", "test_super",
    "test_named_expressions", "test_types", "test_statistics", "test_heapq", "test_bisect",
    "test_deque", "test_copy", "test_enum",
)
