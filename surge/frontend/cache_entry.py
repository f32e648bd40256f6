"""What a capture produces: one cache entry of a code object (``capture.py`` makes them)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class BreakReason:
    reason: str
    location: str | None
    source_line: str = ""

    def __str__(self):
        return f"{self.reason}\n    at {self.location}" if self.location else self.reason


@dataclass
class CacheEntry:
    run: object                      # generated fn(fn, args, kwargs) -> result or MISS
    source: str                      # its Python source
    guards_text: str
    diagnose: object                 # fn(fn, args, kwargs) -> text of first failing guard
    graph: torch.fx.GraphModule | None = None
    fallback: BreakReason | None = None
    graph_break: BreakReason | None = None  # the frame was split there
    # The frame was split at the next iteration of a loop it had resumed inside (not a
    # graph break: CPython runs the loop's FOR_ITER, breaks.py).
    loop_split: BreakReason | None = None
    compile_seconds: float = 0.0
    disk_record: object = None       # what the frontend disk cache stores of it (disk_cache.Record)
    recompile_reason: str | None = None  # a recompile: the guard of the previous entry that failed
    constants: object = None         # its ConstTable: when an object it holds weakly dies, it is dropped
