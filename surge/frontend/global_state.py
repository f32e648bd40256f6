"""torch's process-wide state is the same after a capture as before it, on every exit.

Capture runs user and library code symbolically, but a few calls reach torch for real
(a C function called on Python values, a backend that traces with a dispatch mode).
Should one of them change process state, every later eager call would see it: an open
functorch level makes ``loss.backward()`` fail for the rest of the process. So
``preserved_global_state`` snapshots that state around each capture attempt, puts
back anything that changed, and reports it: a ``GlobalStateLeak`` (an internal
error: the frame then runs eagerly) naming each piece, or, when the capture already
failed, a note on that failure.
"""
from __future__ import annotations

import builtins
import contextlib

import torch
from torch.utils._device import DeviceContext

_functorch = torch._C._functorch
_AUTOCAST_DEVICES = ("cpu", "cuda")
_POP_INTERPRETER = {
    _functorch.TransformType.Grad: _functorch._grad_decrement_nesting,
    _functorch.TransformType.Jvp: _functorch._jvp_decrement_nesting,
    _functorch.TransformType.Vmap: _functorch._vmap_decrement_nesting,
    _functorch.TransformType.Functionalize: _functorch._func_decrement_nesting,
}


def functorch_transform_active() -> bool:
    """Whether a torch.func transform (grad, vmap, ...) is running: its wrapped tensors
    pass a plain tensor's guards, so entries are guarded on this and capture refuses it."""
    return _functorch.maybe_current_level() is not None


def torch_function_mode_active() -> bool:
    """Whether a TorchFunctionMode is on torch's stack (a user's mode, ``torch.device``):
    it changes what every op computes, so entries are guarded on this and capture refuses it."""
    return torch._C._len_torch_function_stack() > 0


def device_modes() -> tuple | None:
    """The devices of the DeviceContexts (``torch.set_default_device``, ``with torch.device``)
    that make up torch's function mode stack, bottom first; None when another mode is on
    it. Capture models those (``variables/device_modes.py``) and no other."""
    devices = []
    for i in range(torch._C._len_torch_function_stack()):
        mode = torch._C._get_function_stack_at(i)
        if type(mode) is not DeviceContext:
            return None
        devices.append(mode.device)
    return tuple(devices)


def default_device_context() -> tuple | None:
    """torch.set_default_device's own context: None, or (its device, the device of the
    context it replaced on entering, or None)."""
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    if context is None:
        return None
    return context.device, context.prev_mode.device if context.prev_mode is not None else None


@contextlib.contextmanager
def device_modes_set_aside(count: int):
    """The bottom ``count`` modes (DeviceContexts the trace models) off torch's stack while
    capture and the backend run: they would place surge's own tensors on their device.
    Put back below anything pushed meanwhile (which ``preserved_global_state`` reports)."""
    pop, push = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack
    modes = [pop() for _ in range(count)][::-1]
    try:
        yield
    finally:
        pushed = [pop() for _ in range(torch._C._len_torch_function_stack())][::-1]
        for mode in modes + pushed:
            push(mode)


# Python's builtins as surge found them: its own code runs with these (a program may put
# others in their place, as test_functools caches ``len`` in builtins).
_PYTHON_BUILTINS = dict(builtins.__dict__)


_PROGRAMS_BUILTINS: list = []  # the program's builtins while python_builtins() runs, innermost last


@contextlib.contextmanager
def python_builtins():
    """While capture runs, builtins the program replaced are Python's again (surge's own code
    calls them); ``programs_builtins()`` is what the trace reads meanwhile. Put back on exit."""
    current = builtins.__dict__
    replaced = {k: v for k, v in current.items() if k in _PYTHON_BUILTINS and _PYTHON_BUILTINS[k] is not v}
    _PROGRAMS_BUILTINS.append(dict(current) if replaced else current)
    current.update({k: _PYTHON_BUILTINS[k] for k in replaced})
    try:
        yield
    finally:
        current.update(replaced)
        _PROGRAMS_BUILTINS.pop()


def programs_builtins() -> dict:
    """The builtins the program sees (its own replacements included)."""
    return _PROGRAMS_BUILTINS[-1] if _PROGRAMS_BUILTINS else builtins.__dict__


def run_with_device_modes_set_aside(compiled, count: int):
    """``compiled`` (a graph captured under ``count`` DeviceContexts, whose factories name
    their devices) run with them off the stack: torch calls the modes' Python handler for
    every op otherwise, which costs the host code more than it does eager code."""
    pop, push = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack

    def run(*args):
        modes = [pop() for _ in range(count)]   # top first
        try:
            return compiled(*args)
        finally:
            for mode in reversed(modes):   # back in their order (a graph pushes no mode)
                push(mode)
    return run


class GlobalStateLeak(RuntimeError):
    """A capture changed torch's global state (restored before this is raised)."""


def _functorch_depth() -> int:
    return len(_functorch.get_interpreter_stack() or ())


def _pop_functorch_levels(depth: int) -> None:
    while _functorch_depth() > depth:
        _POP_INTERPRETER[_functorch.peek_interpreter_stack().key()]()


def _set_deterministic(state) -> None:
    torch.use_deterministic_algorithms(state[0], warn_only=state[1])


def _pop_modes(length, pop) -> None:
    def restore(saved):
        while length() > saved:
            pop()
    return restore


# name -> (read, restore); restore gets what read returned before the capture.
_STATE = {
    "functorch level": (_functorch_depth, _pop_functorch_levels),
    "grad mode": (torch.is_grad_enabled, torch._C._set_grad_enabled),
    "forward-mode AD": (torch._C._is_fwd_grad_enabled, torch._C._set_fwd_grad_enabled),
    "inference mode": (torch.is_inference_mode_enabled, None),
    "default dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "deterministic algorithms": (
        lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        _set_deterministic),
    "functorch inplace requires_grad": (_functorch.get_inplace_requires_grad_allowed,
                                        _functorch.set_inplace_requires_grad_allowed),
    "torch function modes": (torch._C._len_torch_function_stack,
                             _pop_modes(torch._C._len_torch_function_stack, torch._C._pop_torch_function_stack)),
    "torch dispatch modes": (torch._C._len_torch_dispatch_stack,
                             _pop_modes(torch._C._len_torch_dispatch_stack, torch._C._pop_torch_dispatch_stack)),
    "autocast cache": (torch.is_autocast_cache_enabled, torch.set_autocast_cache_enabled),
}
for _device in _AUTOCAST_DEVICES:
    _STATE[f"autocast on {_device}"] = (
        lambda d=_device: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)),
        lambda state, d=_device: (torch.set_autocast_enabled(d, state[0]), torch.set_autocast_dtype(d, state[1])),
    )


def snapshot() -> dict:
    return {name: read() for name, (read, _) in _STATE.items()}


def restore(before: dict) -> list[str]:
    """Put back what differs from ``before``; the descriptions of what differed."""
    leaked = []
    for name, (read, put_back) in _STATE.items():
        now = read()
        if now != before[name]:
            leaked.append(f"{name} {now!r} (was {before[name]!r})")
            if put_back is not None:
                put_back(before[name])
    return leaked


@contextlib.contextmanager
def preserved_global_state(what: str):
    """Around one capture attempt of ``what``: state changed inside is put back; a
    capture that otherwise succeeded raises GlobalStateLeak naming it."""
    before = snapshot()
    try:
        yield
    except BaseException as e:
        leaked = restore(before)
        if leaked:
            e.add_note(f"surge: capture of {what} changed torch's global state (restored): " + "; ".join(leaked))
        raise
    leaked = restore(before)
    if leaked:
        raise GlobalStateLeak(f"capture of {what} changed torch's global state (restored): " + "; ".join(leaked))
