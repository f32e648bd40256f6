"""``torch.autocast`` blocks (also ``torch.amp.autocast``, ``torch.cpu.amp.autocast``,
``torch.cuda.amp.autocast`` and functions decorated with one).

Entering a block records ``torch.amp.autocast_mode._enter_autocast(device, dtype,
enabled, cache)`` in the graph and leaving records ``_exit_autocast(<that node>)``,
so the graph runs its ops under autocast as eager does, and the aot layer, whose
tracer tensors carry the real device, sees the casts autocast makes when it replays
the graph. During capture, ops inside a block learn their result dtype from a run
on meta tensors that report the real device (autocast casts only tensors of its
device type), under the same autocast state.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.amp.autocast_mode import _enter_autocast, _exit_autocast
from torch.utils._python_dispatch import TorchDispatchMode

from ..meta import CPU, META
from .base import Variable, unsupported
from .constant import NONE, ConstantVariable

AUTOCAST_GRAPH_FUNCTIONS = (_enter_autocast, _exit_autocast)
# Classes and the device type their constructor implies (None: the first argument).
AUTOCAST_CLASSES = {torch.amp.autocast: None, torch.cpu.amp.autocast: "cpu", torch.cuda.amp.autocast: "cuda"}
_LOW_PRECISION = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class AutocastState:
    device_type: str
    dtype: torch.dtype
    enabled: bool
    cache_enabled: bool

    def context(self):
        # The capture-time run never caches casts: its tensors live for one op.
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled, cache_enabled=False)


def make_state(device_type, dtype=None, enabled=True, cache_enabled=None) -> AutocastState:
    if device_type not in ("cpu", "cuda"):
        unsupported(f"torch.autocast for device type {device_type!r} (cpu and cuda are captured)")
    dtype = torch.get_autocast_dtype(device_type) if dtype is None else dtype
    if enabled and dtype not in _LOW_PRECISION:
        unsupported(f"torch.autocast({device_type!r}, dtype={dtype}): only bfloat16 and float16 are captured")
    cache = torch.is_autocast_cache_enabled() if cache_enabled is None else bool(cache_enabled)
    return AutocastState(device_type, dtype, bool(enabled), cache)


def construct_autocast(tx, cls, args, kwargs) -> "AutocastContextVariable":
    values = [a.as_constant() for a in args]
    options = {k: v.as_constant() for k, v in kwargs.items()}
    implied = AUTOCAST_CLASSES[cls]
    if implied is None:
        return AutocastContextVariable(make_state(*values, **options))
    # torch.cpu.amp.autocast(enabled=True, dtype=torch.bfloat16, cache_enabled=True)
    names = ("enabled", "dtype", "cache_enabled")
    options.update(zip(names, values))
    defaults = {"enabled": True, "dtype": torch.bfloat16 if implied == "cpu" else torch.float16, "cache_enabled": True}
    return AutocastContextVariable(make_state(implied, **{**defaults, **options}))


def wrap_autocast_object(tx, value: torch.amp.autocast, source) -> "AutocastContextVariable":
    """A real autocast object: the one a ``@torch.autocast(...)`` decorator closes over, or
    the one a graph break hands to the resume function (made anew on each call, so it is
    guarded by type and settings, not identity)."""
    state = make_state(value.device, value.fast_dtype, value._enabled, value._cache_enabled)
    if source is not None:
        cls = tx.guards.consts.ref(type(value), "autocast_cls")
        dtype = tx.guards.consts.ref(state.dtype, str(state.dtype).replace("torch.", ""))
        tx.guards.add(source, f"type({{v}}) is {cls} and {{v}}.device == {state.device_type!r} "
                      f"and {{v}}.fast_dtype is {dtype} and {{v}}._enabled is {state.enabled} "
                      f"and {{v}}._cache_enabled is {state.cache_enabled}",
                      f"{source.name()} is {type(value).__qualname__}({state.device_type!r}, dtype={state.dtype}, "
                      f"enabled={state.enabled}, cache_enabled={state.cache_enabled})")
    return AutocastContextVariable(state)


def autocast_expression(consts, ctx: "AutocastContextVariable") -> str:
    """Python source that makes a real autocast object like ``ctx`` (for a graph break)."""
    s = ctx.state
    cls = consts.ref(torch.amp.autocast, "autocast")
    dtype = consts.ref(s.dtype, str(s.dtype).replace("torch.", ""))
    return f"{cls}({s.device_type!r}, dtype={dtype}, enabled={s.enabled}, cache_enabled={s.cache_enabled})"


_CAPTURED_DEVICE_TYPES = ("cpu", "cuda")


def ambient_autocast_state() -> tuple:
    """The caller's autocast settings for the device types capture models."""
    return tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _CAPTURED_DEVICE_TYPES) \
        + (torch.is_autocast_cache_enabled(),)


def enter_ambient_autocast(tx) -> None:
    """A frame called inside the caller's autocast region: its graph enters the same
    autocast state first (so the graph means the same wherever it runs, and the aot
    layer sees the casts), under a guard on that state."""
    if not torch._C._is_any_autocast_enabled():
        return
    state = ambient_autocast_state()
    enabled = {d for d, (on, _) in zip(_CAPTURED_DEVICE_TYPES, state) if on}
    if not enabled:
        unsupported("called with autocast enabled for a device type capture does not model")
    ref = tx.guards.consts.ref(ambient_autocast_state, "autocast_state")
    tx.guards.add(None, f"{ref}() == {tx.guards.consts.ref(state, 'autocast_settings')}",
                  f"autocast state (enabled, dtype) per cpu/cuda, cache: {state}")
    for device_type, (on, dtype) in zip(_CAPTURED_DEVICE_TYPES, state):
        if on:
            AutocastContextVariable(make_state(device_type, dtype, True, state[-1])).enter(tx, block=False)


def close_open_blocks(tx) -> None:
    """At the end of the graph: leave the caller's autocast state entered at its start
    and, at a graph break inside autocast blocks, those blocks (the break code re-enters
    them in CPython), innermost first."""
    for ctx in reversed(tx.autocast_blocks):
        tx.graph.create_node("call_function", _exit_autocast, (ctx.enter_node,), {}, tx.stack_trace())
    tx.autocast_blocks.clear()


class AutocastContextVariable(Variable):
    def __init__(self, state: AutocastState):
        self.state = state
        self.enter_node = None

    def python_type(self):
        return torch.amp.autocast

    def truthy(self, tx):
        return True

    def enter(self, tx, block: bool = True) -> Variable:
        s = self.state
        self.enter_node = tx.graph.create_node(
            "call_function", _enter_autocast, (s.device_type, s.dtype, s.enabled, s.cache_enabled), {},
            tx.stack_trace())
        tx.autocast_blocks.append(self)
        if block and tx.current_frame is not None:
            tx.current_frame.block_stack.append(self)
        return NONE

    def exit(self, tx) -> Variable:
        if self.enter_node is None or not tx.autocast_blocks or tx.autocast_blocks[-1] is not self:
            unsupported("autocast blocks left out of order")
        tx.graph.create_node("call_function", _exit_autocast, (self.enter_node,), {}, tx.stack_trace())
        tx.autocast_blocks.pop()
        stack = tx.current_frame.block_stack if tx.current_frame is not None else []
        if stack and stack[-1] is self:
            stack.pop()
        return NONE

    def getattr(self, tx, name):
        from .contexts import context_method

        method = context_method(self, name)
        if method is not None:
            return method
        if name in ("device", "fast_dtype"):
            return ConstantVariable(self.state.device_type if name == "device" else self.state.dtype)
        unsupported(f"attribute {name!r} of a torch.autocast object")


def restore_autocast_on_error(compiled):
    """``compiled`` for a graph with autocast nodes: if it raises between an enter and
    its exit (eager would have left the `with` block), the caller's autocast state,
    nesting depth and cast cache are restored as the block's exit would."""
    def run(*args):
        saved = ambient_autocast_state()
        depth = _nesting_depth()
        try:
            return compiled(*args)
        except BaseException:
            for device_type, (enabled, dtype) in zip(_CAPTURED_DEVICE_TYPES, saved):
                torch.set_autocast_enabled(device_type, enabled)
                torch.set_autocast_dtype(device_type, dtype)
            for _ in range(_nesting_depth() - depth):
                torch.autocast_decrement_nesting()
            if depth == 0:
                torch.clear_autocast_cache()
            raise

    return run


def _nesting_depth() -> int:
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return depth


# ---- op metadata under autocast ------------------------------------------------------

class DeviceMetaTensor(torch.Tensor):
    """A meta tensor that reports its real device, so autocast treats it as eager would.
    Made without requires_grad: ``_requiring_grad`` gives it the autograd history."""

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device):
        r = torch.Tensor._make_wrapper_subclass(
            cls, meta.shape, strides=meta.stride(), storage_offset=meta.storage_offset(), dtype=meta.dtype,
            device=device, requires_grad=False)
        r.meta = meta
        return r

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        device = None

        def unwrap(v):
            nonlocal device
            if isinstance(v, DeviceMetaTensor):
                device = device or v.device
                return v.meta
            return v

        args, kwargs = torch.utils._pytree.tree_map(unwrap, (args, kwargs or {}))
        requested = kwargs.get("device")
        if requested is not None and torch.device(requested).type != "meta":
            # An op that moves or makes a tensor on a device (``_to_copy`` of ``type_as``,
            # ``new_zeros``): metadata that reports that device, never a copy out of meta.
            device = torch.device(requested)
            kwargs = {**kwargs, "device": META}
        out = func(*args, **kwargs)
        return torch.utils._pytree.tree_map(
            lambda v: DeviceMetaTensor(v, device) if isinstance(v, torch.Tensor) and v.device.type == "meta" else v, out)


class _FactoriesOnMeta(TorchDispatchMode):
    """Inside the metadata run, an op with no tensor argument that makes a tensor on a
    device (``torch.empty(..., device=query.device)`` inside SDPA's causal mask, the
    scalar ``torch.where`` wraps) makes metadata on that device, not a real tensor that
    would then meet meta tensors."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Else torch wraps __torch_dispatch__ in a Dynamo-disabling wrapper that imports
        # torch._dynamo on its first call; capture never runs under Dynamo.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors: list = []
        _flatten_tensors((args, kwargs), tensors)
        if tensors or not any(a.name == "device" for a in func._schema.arguments):
            return func(*args, **kwargs)
        device = kwargs.get("device")
        # An ATen factory without a device makes a CPU tensor (torch's default-device
        # mode acts on torch's Python functions only, and the trace made those explicit).
        device = torch.device(device) if device is not None else CPU
        if device.type == "meta":
            return func(*args, **kwargs)
        out = func(*args, **{**kwargs, "device": META})
        return torch.utils._pytree.tree_map(
            lambda v: DeviceMetaTensor(v, device) if isinstance(v, torch.Tensor) else v, out)


class _WithHistory(torch.autograd.Function):
    """``make()``'s tensor as the result of an autograd op: a non-leaf that requires grad.
    Capture never runs its backward; autograd only needs to see the history, so that an
    in-place op on an op's result is as legal as in eager (on a leaf it is not)."""

    @staticmethod
    def forward(ctx, anchor, make):
        return make()

    @staticmethod
    def backward(ctx, grad):
        return None, None


def _history_anchor() -> torch.Tensor:
    return torch.empty((), device="meta", requires_grad=True)


def _requiring_grad(make, leaf: bool) -> torch.Tensor:
    """A tensor from ``make()`` that requires grad, as a leaf or as an op's result."""
    if leaf:
        return make().requires_grad_(True)
    with torch.enable_grad():
        return _WithHistory.apply(_history_anchor(), make)


def _flatten_tensors(value, out: list) -> None:
    """Meta tensors of an op's arguments, in the order record_op lists their devices."""
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _flatten_tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _flatten_tensors(v, out)


def _rewrap(value, devices: dict):
    if isinstance(value, torch.Tensor):
        device = devices[id(value)]
        if not value.requires_grad:
            return DeviceMetaTensor(value, device)
        return _requiring_grad(lambda: DeviceMetaTensor(value, device), leaf=value.grad_fn is None)
    if isinstance(value, (tuple, list)):
        return type(value)(_rewrap(v, devices) for v in value)
    if isinstance(value, dict):
        return {k: _rewrap(v, devices) for k, v in value.items()}
    return value


def _to_meta(value):
    if isinstance(value, DeviceMetaTensor):
        meta = value.meta
        if value.requires_grad and not meta.requires_grad:
            # The wrapper's autograd history lives on the wrapper; its meta tensor,
            # made below autograd, gets the same leafness.
            meta = _requiring_grad(meta.detach, leaf=value.grad_fn is None)
        return meta
    if isinstance(value, torch.Tensor) and value.device.type != "meta":
        # A tensor made from Python data on the reported device (``x.new_tensor([...])``
        # copies its data there without dispatching on ``x``): the graph makes it again
        # at run time, capture keeps its metadata.
        def meta_like():
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=META)

        return _requiring_grad(meta_like, leaf=value.grad_fn is None) if value.requires_grad else meta_like()
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        items = [_to_meta(v) for v in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else type(value)(items)
    return value


def run_under_autocast(blocks: list, run, args: tuple, kwargs: dict, devices: list):
    """``run(args, kwargs)`` with tensors that report their real devices, under the
    autocast states of the open blocks; the result back on plain meta tensors."""
    tensors: list = []
    _flatten_tensors((args, kwargs), tensors)
    by_id = {id(t): d for t, d in zip(tensors, devices)}
    if len(tensors) != len(devices):
        unsupported("an op inside an autocast block whose tensor arguments could not be matched to devices")
    with contextlib.ExitStack() as stack:
        for ctx in blocks:
            stack.enter_context(ctx.state.context())
        stack.enter_context(_FactoriesOnMeta())
        result = run(_rewrap(args, by_id), _rewrap(kwargs, by_id))
    return _to_meta(result)
