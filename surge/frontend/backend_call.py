"""Handing a captured graph to the backend, under the backend protocol.

Whatever goes wrong on the backend's side becomes one ``BackendCompilerFailed``
naming the backend: it raised, or it returned something that cannot run the graph
(None, say). The capture then runs the frame eagerly with a warning, or raises
under ``fullgraph=True``, as for any backend failure.
"""
from __future__ import annotations

from ..backends import PROTOCOL, describe_backend
from ..errors import BackendCompilerFailed
from .global_state import device_modes, device_modes_set_aside


def call_backend(backend, gm, example_inputs: list):
    """``backend(gm, example_inputs)``, checked to be a callable. torch's default-device
    modes are off the stack meanwhile: the graph's factories name their devices, and the
    backend's own tensors are not the user's to place."""
    try:
        with device_modes_set_aside(len(device_modes() or ())):
            compiled = backend(gm, example_inputs)
    except Exception as e:
        raise BackendCompilerFailed(f"backend {describe_backend(backend)} raised {type(e).__name__}: {e}") from e
    if not callable(compiled):
        raise BackendCompilerFailed(f"backend {describe_backend(backend)} returned {type(compiled).__name__}, "
                                    f"not a callable; {PROTOCOL}")
    return compiled
