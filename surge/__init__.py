"""surge: a just-in-time compiler for PyTorch programs, written in Python.

    import surge
    fast = surge.compile(model)        # or @surge.compile on a function
    out = fast(x)                      # same result as model(x), captured and cached

See README.md for the tour and docs/ for each layer.
"""
from .api import (compile, cudagraph_mark_step_begin, explain, graph_break, mark_dynamic, mark_static,
                  maybe_mark_dynamic, reset)
from .backends.default import default_backend as backend
from .counters import counters

__version__ = "0.1.0"

__all__ = ["backend", "compile", "counters", "cudagraph_mark_step_begin", "explain", "graph_break", "mark_dynamic", "mark_static",
           "maybe_mark_dynamic", "reset", "__version__"]
