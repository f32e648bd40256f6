"""The default device: ``torch.set_default_device``, ``with torch.device(...)`` blocks and
``torch.get_default_device``, traced as torch's ``DeviceContext`` mode runs them.

torch implements the default device as a TorchFunctionMode: ``set_default_device(d)``
puts a ``DeviceContext`` at the bottom of the mode stack (and keeps it as its own
context), ``with torch.device(d):`` pushes one on top and pops the top on exit, and the
mode's ``__torch_function__`` gives each factory function of torch's list
(``torch.utils._device._device_constructors``) called without a device the device of
the topmost context. The trace models that stack: a call made under such modes only
is captured (guarded on the stack's devices, so a new default device recompiles), a
factory without a device gets the modelled device as an explicit ``device=`` in the
graph, blocks in the frame push and pop the model, and ``set_default_device`` in the
frame follows torch's own steps and is replayed after the graph (it outlives the
call). The real modes are set aside while capture and the backend run
(``global_state.device_modes_set_aside``): they would place surge's own tensors.

What torch does that is not a plain push or pop is modelled as it is: a subclass's
``__torch_function__`` reached through the modes runs with them popped (its factories
make CPU tensors), ``torch._C.DisableTorchFunction()`` turns them off for factories
but not for ``get_default_device``, and ``set_default_device`` leaves the stack as its
``__exit__``/``__enter__`` pair leaves it.
"""
from __future__ import annotations

import contextlib

import torch
from torch.utils._device import _device_constructors

from ..global_state import default_device_context
from .base import Variable, unsupported
from .constant import NONE, ConstantVariable

DEVICE_CONSTRUCTORS = frozenset(_device_constructors())


class DeviceModes:
    """The devices of the DeviceContexts on torch's mode stack as the trace models them
    (bottom first), and torch.set_default_device's own context."""

    def __init__(self, ambient: tuple = ()):
        self.stack = list(ambient)
        self.ambient_depth = len(ambient)  # the caller's modes (the graph runs with them set aside)
        self.blocks: list = []  # the devices of the blocks entered in the trace, still open
        self.disabled = 0       # inside DisableTorchFunction(): factories get no device
        self.in_handler = 0     # inside a subclass override reached through the modes: none on the stack
        # (device, device of the context it replaced) of set_default_device's context, once the
        # trace read or changed it (the read is guarded); None: none set; _UNREAD: not read yet.
        self._default_context = _UNREAD

    def visible_stack(self) -> list:
        return [] if self.in_handler else self.stack

    def factory_device(self):
        """The device a factory called without one gets, or None (torch's default, CPU)."""
        stack = self.visible_stack()
        return stack[-1] if stack and not self.disabled else None

    def default_context(self, tx):
        if self._default_context is _UNREAD:
            self._default_context = default_device_context()
            ref = tx.guards.consts.ref(default_device_context, "default_device_context")
            value = tx.guards.consts.ref(self._default_context, "default_device_state")
            tx.guards.add(None, f"{ref}() == {value}",
                          f"torch.set_default_device's context (device, replaced device) is {self._default_context}")
        return self._default_context

    @contextlib.contextmanager
    def override_handler(self):
        """A subclass override reached through the modes: torch pops each mode while its
        handler runs, so the override sees none."""
        active = bool(self.stack) and not self.disabled and not self.in_handler
        self.in_handler += active
        try:
            yield
        finally:
            self.in_handler -= active


_UNREAD = object()


def install_ambient(tx, ambient: tuple) -> None:
    """The caller's DeviceContexts (``ambient``: their devices, bottom first), modelled
    under a guard on them."""
    from ..global_state import device_modes

    tx.device_modes = DeviceModes(ambient)
    ref = tx.guards.consts.ref(device_modes, "device_modes")
    value = tx.guards.consts.ref(ambient, "ambient_device_modes")
    tx.guards.add(None, f"{ref}() == {value}", f"torch's mode stack is DeviceContexts on {list(map(str, ambient))}",
                  actual=lambda _: f"the mode stack is {device_modes()}")


def with_factory_device(tx, target, kwargs: dict) -> dict:
    """``kwargs`` of a torch function call, with the device the modes give a factory."""
    if target not in DEVICE_CONSTRUCTORS:
        return kwargs
    given = kwargs.get("device")
    if given is not None and not (given.is_constant() and given.as_constant() is None):
        return kwargs
    device = tx.device_modes.factory_device()
    return kwargs if device is None else {**kwargs, "device": ConstantVariable(device)}


class DeviceBlockVariable(Variable):
    """``with torch.device(d):``: a DeviceContext pushed on top of the stack, popped at exit."""

    def __init__(self, device: torch.device):
        self.device = device

    def python_type(self):
        return torch.device

    def enter(self, tx) -> Variable:
        modes = tx.device_modes
        modes.stack.append(self.device)
        modes.blocks.append(self.device)
        return ConstantVariable(self.device)

    def exit(self, tx) -> Variable:
        # (``with`` loads __exit__ and __enter__ from the device one by one: the block is
        # known by its device.)
        modes = tx.device_modes
        if not modes.blocks or modes.blocks[-1] != self.device:
            unsupported("torch.device blocks left out of order")
        modes.blocks.pop()
        modes.stack.pop()   # torch pops the top, whichever context it is
        return NONE

    def getattr(self, tx, name):
        from .contexts import context_method

        return context_method(self, name) or ConstantVariable(self.device).getattr(tx, name)


def device_block_method(device: torch.device, name: str):
    """``torch.device(d).__enter__`` / ``__exit__`` as the trace calls them."""
    return DeviceBlockVariable(device).getattr(None, name)


def check_open_blocks(tx, open_at_break: list) -> None:
    """At the end of the graph, the blocks the trace entered are those the break code
    enters again (``open_at_break``: their devices, innermost last): none when the frame returns. A block
    left open otherwise (a paused generator's, an ``__enter__()`` called by hand) would
    leave its context pushed."""
    if tx.device_modes.blocks != open_at_break:
        unsupported("a torch.device block left open at the end of the graph")


# ---- torch functions ----------------------------------------------------------------

def _set_default_device(tx, fn, args, kwargs):
    """``torch.set_default_device(d)``: the old context's ``__exit__`` (pops the bottom mode,
    pushes the one it replaced), then the new one's ``__enter__`` (pops every mode, pushes
    itself, keeps the topmost popped one to put back later). Replayed after the graph."""
    if len(args) + len(kwargs) != 1 or (kwargs and "device" not in kwargs):
        unsupported("torch.set_default_device() with other arguments than a device")
    value = args[0] if args else kwargs["device"]
    if not value.is_constant():
        unsupported("torch.set_default_device() with a device that is not a constant")
    modes = tx.device_modes
    if modes.blocks or modes.in_handler:
        unsupported("torch.set_default_device() inside a torch.device block or a __torch_function__ override")
    device = None if value.as_constant() is None else torch.device(value.as_constant())
    context = modes.default_context(tx)
    stack = list(modes.stack)
    if context is not None:
        if len(stack) > 1:  # torch's __exit__ asserts: CPython raises it
            unsupported("torch.set_default_device() with nested DeviceContexts on the mode stack")
        stack = [context[1]] if context[1] is not None else []
    if device is None:
        modes.stack, modes._default_context = stack, None
    else:
        modes.stack, modes._default_context = [device], (device, stack[-1] if stack else None)
    tx.side_effects.set_default_device(ConstantVariable(device))
    return NONE


def _get_default_device(tx, fn, args, kwargs):
    """The topmost DeviceContext's device, else set_default_device's, else CPU. One without
    an index is answered by ``torch.tensor([]).device``: where a factory puts a tensor now
    (CPU and meta have no index; a CUDA device's is the current one: not modelled)."""
    if args or kwargs:
        unsupported("torch.get_default_device() with arguments")
    modes = tx.device_modes
    stack = modes.visible_stack()
    if stack:
        device = stack[-1]
    else:
        context = modes.default_context(tx)
        device = context[0] if context is not None else _CPU
    if device.index is None:
        device = modes.factory_device() or _CPU
        if device.index is None and device.type not in ("cpu", "meta"):
            unsupported(f"torch.get_default_device() on {device} (its index is the current device's)")
    return ConstantVariable(device)


_CPU = torch.device("cpu")


DEVICE_RULES = {torch.set_default_device: _set_default_device, torch.get_default_device: _get_default_device}
