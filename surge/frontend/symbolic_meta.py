"""Running ops on meta tensors whose sizes are symbolic.

Many of torch's C++ meta kernels read sizes as plain integers (``view`` calls
``numel()``, ``expand`` wants concrete sizes) and refuse symbolic ones; torch
keeps Python meta kernels and references for those, which its *Python
dispatcher* selects. While a capture (or an aot trace) has symbolic sizes, its
meta runs happen inside ``symbolic_meta()``, so every size decision they make is
a SymInt operation the shape environment sees. Static captures never enter it
(it costs a little per op).
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def symbolic_meta():
    from torch._dispatch.python import enable_python_dispatcher

    from .lazy_dynamo import defer_dynamo_import

    defer_dynamo_import()  # the references it runs are wrapped by torch's Dynamo-disable
    with enable_python_dispatcher():
        yield
