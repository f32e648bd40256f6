"""Whether Triton kernels run in its CPU interpreter (``TRITON_INTERPRET=1``), and switching it.

Triton decides when a function is decorated with ``@triton.jit``; a generated
module loaded while interpretation is on holds interpreted kernels.
"""
from __future__ import annotations

import contextlib

from ..options import environment_override, triton_interpret_setting


def interpreting() -> bool:
    try:
        from triton import knobs
        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return triton_interpret_setting()


@contextlib.contextmanager
def interpret_mode(enabled: bool):
    """Decorate kernels as interpreted (or compiled) while inside this block."""
    knobs = None
    try:
        from triton import knobs
        old_knob = knobs.runtime.interpret
        knobs.runtime.interpret = enabled
    except (ImportError, AttributeError):
        knobs = None
    try:
        with environment_override("TRITON_INTERPRET", "1" if enabled else "0"):
            yield
    finally:
        if knobs is not None:
            knobs.runtime.interpret = old_knob


def libdevice_module():
    """Triton's libdevice, or surge's stand-ins for it in the interpreter (which has none)."""
    if interpreting():
        from . import interpreter_libdevice
        return interpreter_libdevice
    from triton.language.extra import libdevice
    return libdevice
