"""Test methods the suite runner does not compile, and why.

A compiler may legitimately change what these tests observe: the interpreter's
frames and tracing hooks, reference counts and collection timing, threads and
other processes, and how deep Python recursion can go (surge executes bytecode
symbolically, in Python frames of its own). Everything else is compiled, and a
difference in its outcome is a surge bug, never a reason to add it here.

A method is skipped when its source mentions one of ``SOURCE_MARKERS``, or when
it is listed in ``METHODS`` with the reason found by reading it.
"""
from __future__ import annotations

import inspect

# Text in a test method's source -> why a compiled run may differ from eager
# without surge being wrong.
SOURCE_MARKERS = {
    "sys._getframe": "inspects interpreter frames",
    "currentframe": "inspects interpreter frames",
    "tb_frame": "inspects interpreter frames",
    "f_locals": "inspects interpreter frames",
    "f_back": "inspects interpreter frames",
    "f_lineno": "inspects interpreter frames",
    "tb_lineno": "inspects traceback line numbers of generated code",
    "settrace": "installs a tracing hook",
    "setprofile": "installs a profiling hook",
    "gc.": "depends on garbage-collection timing",
    "gc_collect": "depends on garbage-collection timing",
    "disable_gc": "depends on garbage-collection timing",
    "extract_tb": "reads the traceback's function names (surge's generated code is in it)",
    "walk_tb": "reads the traceback's function names (surge's generated code is in it)",
    "format_tb": "reads the traceback's function names (surge's generated code is in it)",
    "getrefcount": "counts references",
    "tracemalloc": "measures allocations",
    "threading": "starts threads",
    "subprocess": "starts processes",
    "script_helper": "starts processes",
    "assert_python_ok": "starts processes",
    "run_python_until_end": "starts processes",
    "setrecursionlimit": "depends on the recursion limit",
    "infinite_recursion": "depends on the recursion limit",
    "RecursionError": "depends on the recursion limit",
    "get_recursion_depth": "depends on the recursion limit",
    "bigmemtest": "needs a lot of memory",
    "sys.getsizeof": "measures object sizes",
    "signal.": "uses signals (the runner's time limit is a signal)",
    "faulthandler": "uses faulthandler",
    "check_impl_detail": "checks CPython implementation details",
    "__code__": "inspects code objects",
    "dis.": "inspects bytecode",
}

# (module, class, method) -> reason, for what the markers do not catch.
METHODS: dict[tuple[str, str, str], str] = {
}


def skip_reason(module_name: str, cls: type, method_name: str) -> str | None:
    """Why this method is not compiled, or None."""
    listed = METHODS.get((module_name, cls.__name__, method_name))
    if listed:
        return listed
    fn = getattr(cls, method_name, None)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return "has no Python source"
    for marker, reason in SOURCE_MARKERS.items():
        if marker in source:
            return f"{reason} ({marker!r})"
    return None
