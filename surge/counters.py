"""Process-wide event counters, exposed as ``surge.counters``."""
from __future__ import annotations

import collections

COUNTER_NAMES = (
    "frames",         # code objects surge was asked to run
    "graphs",         # FX graphs captured and handed to a backend
    "graph_breaks",   # places where capture stopped and CPython took over
    "recompiles",     # compiles of a code object that already had a cache entry
    "cache_hits",     # calls served by a cached entry whose guards passed
    "cache_misses",   # calls whose guards all failed (a compile followed)
    "fallbacks",      # frames run eagerly: unsupported construct or internal error
    "kernels",        # kernels in compiled graphs (generated, or loaded from the disk cache)
)


class Counters(collections.Counter):
    """A Counter that always shows the standard names, even when zero."""

    def __missing__(self, key):
        return 0

    def __getattr__(self, name):
        # surge.counters.graph_breaks reads surge.counters["graph_breaks"]: the standard
        # names and any counter a layer has added; other names are not counters.
        if name in COUNTER_NAMES or (not name.startswith("_") and name in self.keys()):
            return self[name]
        raise AttributeError(f"surge.counters has no counter {name!r}; counters: {', '.join(self)}")

    def reset(self) -> None:
        self.clear()
        for name in COUNTER_NAMES:
            self[name] = 0

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={v}" for k, v in self.items())
        return f"surge.counters({items})"


counters = Counters()
counters.reset()
