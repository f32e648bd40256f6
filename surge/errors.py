"""Errors that surge raises to users. Each names the user's code where it can."""
from __future__ import annotations


class SurgeError(RuntimeError):
    """Base of every error surge raises on purpose."""


class Unsupported(SurgeError):
    """Capture met something it cannot put in a graph.

    ``reason`` says what, ``location`` is the user's ``file:line`` (and source
    line when known). Without ``fullgraph=True`` this never reaches the user: the
    frame runs eagerly (or, once graph breaks exist, the graph is split).
    """

    def __init__(self, reason: str, location: str | None = None):
        self.reason = reason
        self.location = location
        super().__init__(f"{reason}\n  at {location}" if location else reason)


class BackendCompilerFailed(SurgeError):
    """A backend raised while compiling a captured graph, or returned no callable."""


class InvalidBackend(SurgeError, TypeError):
    """``surge.compile``'s backend cannot be used: not callable, or it cannot be called
    as ``backend(gm, example_inputs)``."""


class InternalError(SurgeError):
    """A bug in surge, with the user's location attached for the report."""


class NeedsStaticSizes(SurgeError):
    """A graph with symbolic sizes has an op whose lowering needs static sizes: the
    backend compiles that graph per concrete sizes instead (``backends/specialize.py``)."""


class SizeGuardFailed(SurgeError):
    """A call's sizes break a guard that a graph compiled for symbolic sizes relies on
    (``surge.lowering.size_vars``): the graph must be compiled again for them."""
