"""Whether Triton kernels run in its CPU interpreter (``TRITON_INTERPRET=1``), and switching it.

Triton decides when a function is decorated with ``@triton.jit``; a generated
module loaded while interpretation is on holds interpreted kernels.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools

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


# the exception types an index check's assert message may name (codegen/triton/kernel.py)
_INDEX_ERRORS = {"IndexError": IndexError, "RuntimeError": RuntimeError}


def asserting_in_interpreter(launch, meta: dict):
    """``launch``, for a kernel with index checks run by the interpreter: with its device
    asserts on, and a failed index check raised as the error its message names (eager's
    on CPU tensors). The interpreter runs ``tl.device_assert`` only when its builder's
    options say debug, which a kernel's ``debug=True`` does not reach: they are switched on
    for the launch and back after it."""
    if not meta.get("index_checks") or not interpreting():
        return launch
    from triton.runtime import interpreter

    @functools.wraps(launch)
    def run(*args):
        builder = interpreter.interpreter_builder
        old = builder.options
        builder.options = dataclasses.replace(old, debug=True)
        try:
            return launch(*args)
        except interpreter.InterpreterError as error:
            kind, _, message = str(error.__cause__).partition(": ")
            if isinstance(error.__cause__, AssertionError) and kind in _INDEX_ERRORS:
                raise _INDEX_ERRORS[kind](message) from None
            raise
        finally:
            builder.options = old
    return run
