"""Guards: the assumptions a captured graph relies on, as Python conditions.

Each guard is one boolean expression over a source's value (written ``{v}``).
The capture collects them as it reads inputs; ``cache`` compiles all guards of
an entry into one generated function, so a call checks them with straight-line
Python and no interpretation of a guard list.
"""
from __future__ import annotations

import math
import types
from dataclasses import dataclass

import torch

from .global_state import functorch_transform_active, torch_function_mode_active
from .native_checks import spec_of
from .sources import ConstTable, Source
from .variables.constant import is_numpy_scalar

# Python values a guard compares by value; every other object is compared by
# identity or by type.
VALUE_TYPES = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis))
# Tensor classes whose properties are torch's own (a subclass may redefine ``is_cpu``).
_TORCH_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


@dataclass(frozen=True, eq=False)
class Guard:
    source: Source | None  # None: a global-state guard (grad mode, default dtype)
    condition: str         # Python expression; "{v}" is the source's value
    text: str              # readable form for explain / logs
    other: Source | None = None  # a second source, "{w}", for guards relating two values
    # The failing value for a recompile message: value -> text (default: describe_actual)
    actual: object = None
    # (token, source) pairs: each "{@name}" token in the condition is that source's value
    # (conditions on several symbolic sizes, dynamic_dims.py).
    more: tuple = ()
    # A static tensor's guard: what ``native_checks`` compares, where an entry checks its
    # tensors in one call (None: checked by ``condition`` only).
    tensor_spec: tuple | None = None
    # The same condition as a call of ``native_checks.CALLS`` (``surge_native``), used
    # where entries check through the extension (None: ``condition`` everywhere).
    native_condition: str | None = None

    def key(self):
        return (self.source, self.condition, self.other, self.more)


def deep_immutable(value) -> bool:
    """A value no operation can change: a number, string, ... or a tuple of such. Every
    fact a guard established about it holds for as long as the object lives."""
    if type(value) in VALUE_TYPES:
        return True
    return type(value) is tuple and all(deep_immutable(item) for item in value)


class GuardSet:
    def __init__(self, consts: ConstTable):
        self.consts = consts
        self.guards: list[Guard] = []
        self._keys: set = set()
        # Sources whose value was a deep-immutable object: the constant naming that object
        # (None once the source was seen holding two objects). An entry checks the call's
        # value is that very object first; only another object gets the guards' checks.
        self.immutable: dict[Source, str | None] = {}

    def add(self, source: Source | None, condition: str, text: str, other: Source | None = None,
            actual=None, more: tuple = (), tensor_spec: tuple | None = None,
            native_condition: str | None = None) -> None:
        guard = Guard(source, condition, text, other, actual, more, tensor_spec, native_condition)
        if guard.key() in self._keys:
            return
        self._keys.add(guard.key())
        self.guards.append(guard)

    def _captured(self, source: Source, value) -> None:
        if not deep_immutable(value) or value is None or isinstance(value, bool) or value is Ellipsis:
            return  # None, True, False, ...: their guards are identity tests already
        # Named now, so that the constant is among those a capture stores (disk_cache.py).
        name = self.consts.ref(value, f"{type(value).__name__}_value")
        if self.immutable.setdefault(source, name) != name:
            self.immutable[source] = None

    # ---- the guard kinds -------------------------------------------------

    def tensor(self, source: Source, value: torch.Tensor) -> None:
        cls = self.consts.ref(type(value), type(value).__name__)
        dtype = self.consts.ref(value.dtype, str(value.dtype).replace("torch.", ""))
        if value.device.type == "cpu" and type(value) in _TORCH_TENSOR_TYPES:
            # A CPU tensor's device has no index: one bool read, no device object made.
            device = "{v}.is_cpu"
        else:
            device = f"{{v}}.device == {self.consts.ref(value.device, 'device_' + value.device.type)}"
        shape, stride = tuple(value.shape), value.stride()
        condition = (
            f"type({{v}}) is {cls} and {{v}}.dtype is {dtype} and {device} "
            f"and {{v}}.shape == {shape!r} and {{v}}.stride() == {stride!r} "
            f"and {{v}}.requires_grad is {value.requires_grad}"
        )
        text = (
            f"{source.name()}: {type(value).__name__}({str(value.dtype).replace('torch.', '')}, "
            f"{value.device}, shape={list(shape)}, stride={list(stride)}, requires_grad={value.requires_grad})"
        )
        self.add(source, condition, text, actual=_tensor_difference(_tensor_fields(value)),
                 tensor_spec=spec_of(value))

    def constant(self, source: Source, value) -> None:
        self._captured(source, value)
        if value is None or isinstance(value, bool) or value is Ellipsis:
            self.add(source, f"{{v}} is {value!r}", f"{source.name()} is {value!r}")
        elif isinstance(value, float) and math.isnan(value):
            self.add(source, "type({v}) is float and {v} != {v}", f"{source.name()} is nan")
        elif type(value) is float and math.isinf(value):
            self.add(source, f"type({{v}}) is float and {{v}} == {'-' if value < 0 else ''}float('inf')",
                     f"{source.name()} == {value!r}")
        elif type(value) is float and value == 0.0:
            sign = "-" if math.copysign(1.0, value) < 0 else ""
            self.consts.values["copysign"] = math.copysign
            self.add(source, f"type({{v}}) is float and {{v}} == 0.0 and copysign(1.0, {{v}}) == {sign}1.0",
                     f"{source.name()} == {value!r}")
        elif type(value) in VALUE_TYPES:
            self.add(source, f"type({{v}}) is {type(value).__name__} and {{v}} == {value!r}",
                     f"{source.name()} == {value!r}")
        elif is_numpy_scalar(value):
            cls = self.consts.ref(type(value), type(value).__name__)
            number = value.item()
            equal = "{v} != {v}" if number != number else f"{{v}} == {number!r}"
            self.add(source, f"type({{v}}) is {cls} and {equal}", f"{source.name()} == {type(value).__name__}({number!r})")
        elif isinstance(value, (range, slice, frozenset)):
            ref = self.consts.ref(value, type(value).__name__)
            cls = self.consts.ref(type(value), type(value).__name__)
            self.add(source, f"type({{v}}) is {cls} and {{v}} == {ref}", f"{source.name()} == {value!r}")
        elif isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            ref = self.consts.ref(value, str(value).replace("torch.", "").replace(":", "_"))
            self.add(source, f"{{v}} == {ref} and type({{v}}) is {type(value).__name__}",
                     f"{source.name()} == {value}")
            self.consts.values.setdefault(type(value).__name__, type(value))
        else:
            self.identity(source, value)

    def identity(self, source: Source, value) -> None:
        ref = self.consts.ref(value, _short_name(value))
        self.add(source, f"{{v}} is {ref}", f"{source.name()} is {_describe(value)}")

    def type_is(self, source: Source, cls: type) -> None:
        ref = self.consts.ref(cls, cls.__name__)
        self.add(source, f"type({{v}}) is {ref}", f"type({source.name()}) is {cls.__qualname__}",
                 actual=lambda v: type(v).__qualname__)

    def length(self, source: Source, cls: type, n: int, value=None) -> None:
        """``value``: the container itself, when the caller has it (a tuple of constants
        is then checked by identity first)."""
        if value is not None:
            self._captured(source, value)
        ref = self.consts.ref(cls, cls.__name__)
        self.add(source, f"type({{v}}) is {ref} and len({{v}}) == {n}",
                 f"type({source.name()}) is {cls.__qualname__} and len == {n}", actual=_type_and_length)

    def dict_keys(self, source: Source, cls: type, keys: tuple) -> None:
        ref = self.consts.ref(cls, cls.__name__)
        self.add(source, f"type({{v}}) is {ref} and tuple({{v}}) == {keys!r}",
                 f"type({source.name()}) is {cls.__qualname__} and keys == {list(keys)!r}",
                 actual=lambda v: f"{type(v).__qualname__} with keys {list(v)!r}")

    def hooks(self, source: Source, pre_hooks: tuple, hooks: tuple) -> None:
        if not pre_hooks and not hooks:
            self.add(source, "not ({v}._forward_hooks or {v}._forward_pre_hooks)",
                     f"{source.name()} has no forward hooks", actual=_hook_counts(0, 0),
                     native_condition="surge_native.no_forward_hooks({v})")
            return
        pre = "(" + "".join(self.consts.ref(h, "hook") + ", " for h in pre_hooks) + ")"
        post = "(" + "".join(self.consts.ref(h, "hook") + ", " for h in hooks) + ")"
        self.add(source, f"tuple({{v}}._forward_pre_hooks.values()) == {pre} and "
                         f"tuple({{v}}._forward_hooks.values()) == {post}",
                 f"{source.name()} has {len(pre_hooks)} forward pre-hooks and {len(hooks)} forward hooks",
                 actual=_hook_counts(len(pre_hooks), len(hooks)))

    def same_object(self, a: Source, b: Source, same: bool) -> None:
        """Two inputs are (or are not) one object: the trace's ``is`` depended on it."""
        self.add(a, f"({{v}} is {{w}}) is {same}", f"({a.name()} is {b.name()}) is {same}", other=b)

    def has_attr(self, source: Source, attr: str, present: bool) -> None:
        self.add(source, f"hasattr({{v}}, {attr!r}) is {present}",
                 f"hasattr({source.name()}, {attr!r}) is {present}")

    def global_state(self, grad_enabled: bool, default_dtype: torch.dtype) -> None:
        self.consts.values["is_grad_enabled"] = torch.is_grad_enabled
        self.consts.values["get_default_dtype"] = torch.get_default_dtype
        dtype = self.consts.ref(default_dtype, str(default_dtype).replace("torch.", ""))
        self.add(None, f"is_grad_enabled() is {grad_enabled}", f"torch.is_grad_enabled() is {grad_enabled}",
                 actual=lambda _: str(torch.is_grad_enabled()))
        self.add(None, f"get_default_dtype() is {dtype}", f"torch.get_default_dtype() is {default_dtype}",
                 actual=lambda _: str(torch.get_default_dtype()))
        # An entry captured outside autocast must not serve a call inside an autocast
        # region (its ops would run in other dtypes): one C call.
        self.consts.values["is_any_autocast_enabled"] = torch._C._is_any_autocast_enabled
        if not torch._C._is_any_autocast_enabled():
            self.add(None, "is_any_autocast_enabled() is False", "autocast is not enabled",
                     actual=lambda _: "autocast is enabled")
        # Nor one captured outside torch.func transforms a call inside one (its tensors
        # are wrappers that pass a plain tensor's guards); a capture inside is refused.
        self.consts.values["functorch_transform_active"] = functorch_transform_active
        if not functorch_transform_active():
            self.add(None, "not functorch_transform_active()", "no torch.func transform is running",
                     actual=lambda _: "a torch.func transform is running")
        # Nor a call under a TorchFunctionMode: the mode decides what each op does.
        self.consts.values["torch_function_mode_active"] = torch_function_mode_active
        if not torch_function_mode_active():
            self.add(None, "not torch_function_mode_active()", "no TorchFunctionMode is active",
                     actual=lambda _: "a TorchFunctionMode is active")

    def render(self) -> str:
        return "\n".join(g.text for g in self.guards)


def _short_name(value) -> str:
    if isinstance(value, types.ModuleType):
        return value.__name__.split(".")[-1]
    return getattr(value, "__name__", None) or type(value).__name__


def _describe(value) -> str:
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, (types.FunctionType, type)):
        return f"{getattr(value, '__qualname__', value)} (id {id(value):#x})"
    return f"<{type(value).__qualname__} object id {id(value):#x}>"


# ---- what a failing guard saw (recompile messages) --------------------------

def _type_and_length(value) -> str:
    try:
        return f"{type(value).__qualname__} of length {len(value)}"
    except TypeError:
        return type(value).__qualname__


def _hook_counts(expected_pre: int, expected_post: int):
    def describe(module) -> str:
        pre, post = len(module._forward_pre_hooks), len(module._forward_hooks)
        same = " (other hook functions)" if (pre, post) == (expected_pre, expected_post) else ""
        return f"{pre} forward pre-hooks and {post} forward hooks{same}"
    return describe


def _tensor_fields(value) -> dict:
    return {"type": type(value).__name__, "dtype": str(value.dtype).replace("torch.", ""),
            "device": str(value.device), "shape": list(value.shape), "stride": list(value.stride()),
            "requires_grad": value.requires_grad}


def _tensor_difference(expected: dict):
    """The fields of a tensor guard the new value does not match: ``shape=[9] (expected [8])``."""
    def describe(value) -> str:
        if not isinstance(value, torch.Tensor):
            return describe_actual(value)
        actual = _tensor_fields(value)
        differing = [f"{name}={actual[name]} (expected {expected[name]})" for name in expected
                     if actual[name] != expected[name]]
        return ", ".join(differing) or describe_actual(value)
    return describe


def describe_actual(value) -> str:
    """A value as a failing guard reports it."""
    if isinstance(value, torch.Tensor):
        return ", ".join(f"{k}={v}" for k, v in _tensor_fields(value).items())
    if type(value) in VALUE_TYPES:
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    if isinstance(value, (list, tuple, dict)):
        return f"{type(value).__qualname__} of length {len(value)}"
    return _describe(value)
