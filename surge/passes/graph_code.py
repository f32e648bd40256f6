"""Regenerate a GraphModule's Python code when it is next run or read, not after each edit.

FX writes a module's Python code in ``recompile`` (10-40 ms for a training graph on
a GPU host's CPU). The aot layer edits each graph several times before anything runs
it (capture, every pass, the partition), and a backend that lowers the graph never
runs that code at all; a training step's graphs spent ~0.8 s of a cold first call
regenerating it. ``code_changed`` marks the code stale instead: the module's next
call or read of ``.code`` (the compiled-graph cache key reads it) regenerates it once.
"""
from __future__ import annotations

import torch.fx


def _stale_forward(self, *args, **kwargs):
    self.recompile()   # installs the real forward on the module's class
    return self.forward(*args, **kwargs)


def _fresh_code(self) -> str:
    if type(self).forward is _stale_forward:
        self.recompile()
    return self._code


def code_changed(gm: torch.fx.GraphModule) -> None:
    """``gm``'s graph changed: regenerate its code on its next call or ``.code`` read."""
    cls = type(gm)
    if cls.__qualname__.split(".")[-1] != "GraphModuleImpl":
        gm.recompile()   # no class of its own to hold the stale forward (FX makes one per instance)
        return
    cls.forward = _stale_forward
    cls.code = property(_fresh_code)
