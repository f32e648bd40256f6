"""torch functions (``torch.*``, ``torch.nn.functional.*``, ``torch.Tensor.*``) as graph ops.

A torch function becomes one ``call_function`` node. A few have rules of their
own: those that answer metadata questions from meta tensors, those that only
read global state the guards fix, and those that are pure functions of Python
values.
"""
from __future__ import annotations

import sys

import torch

from ...registry import rule_registrar
from .base import KnownCallableVariable, unsupported
from .constant import ConstantVariable, is_constant_value
from .builtins import BUILTIN_RULES
from .device_modes import DEVICE_RULES
from .tensor import TensorVariable, record_op
from .tensor_subclasses import make_subclass, tensor_new
from .torch_function import call_overrides, is_overriding, subclass_dispatch_disabled, subclass_dispatch_enabled

TORCH_FUNCTION_RULES: dict = {}

# Functions that change or read global state or tensor data: refused.
UNSUPPORTED_TORCH_FUNCTIONS = {
    torch.manual_seed: "torch.manual_seed() in compiled code (global RNG state)",
    torch.initial_seed: "torch.initial_seed() in compiled code (global RNG state)",
    torch.set_default_dtype: "torch.set_default_dtype() in compiled code",
    torch.is_nonzero: "torch.is_nonzero() reads tensor data",
    torch.equal: "torch.equal() reads tensor data into Python",
    torch.allclose: "torch.allclose() reads tensor data into Python",
    torch.save: "torch.save() in compiled code",
    torch.load: "torch.load() in compiled code",
}


torch_rule = rule_registrar(TORCH_FUNCTION_RULES)


class TorchFunctionVariable(KnownCallableVariable):
    def getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(self.fn, name))
        unsupported(f"attribute {name!r} of {self.fn}")

    def call(self, tx, args, kwargs):
        reason = UNSUPPORTED_TORCH_FUNCTIONS.get(self.fn)
        if reason is not None:
            unsupported(reason)
        rule = TORCH_FUNCTION_RULES.get(self.fn)
        if rule is not None:
            return rule(tx, self.fn, args, kwargs)
        name = getattr(self.fn, "__name__", "")
        if getattr(self.fn, "__module__", None) == "torch._C._functorch":
            unsupported(f"torch._C._functorch.{name}() (functorch transform state) in compiled code")
        if name.startswith(("set_", "seed", "use_deterministic")):
            unsupported(f"torch.{name}() changes global state (not captured in a graph)")
        if args and isinstance(args[0], TensorVariable) and getattr(torch.Tensor, name, None) is self.fn:
            # torch.Tensor.<method>(t, ...), as an override receives it: the method's own rules.
            return args[0].call_method(tx, name, list(args[1:]), dict(kwargs))
        return record_op(tx, "call_function", self.fn, list(args), dict(kwargs))

    def __repr__(self):
        return f"TorchFunctionVariable({getattr(self.fn, '__qualname__', self.fn)})"


@torch_rule(torch._C._has_torch_function, torch._C._has_torch_function_unary,
            torch._C._has_torch_function_variadic)
def _has_torch_function(tx, fn, args, kwargs):
    # True for an argument whose class overrides __torch_function__ (while dispatch is on).
    values = args[0].iterate(tx) if fn is torch._C._has_torch_function else list(args)
    return ConstantVariable(any(is_overriding(v) for v in values) and subclass_dispatch_enabled(tx))


@torch_rule(torch.overrides.handle_torch_function)
def _handle_torch_function(tx, fn, args, kwargs):
    """``handle_torch_function(public_api, relevant_args, *args, **kwargs)`` of torch's
    Python functions: the overrides run on the call's own arguments."""
    public_api = getattr(args[0], "fn", None)
    if public_api is None:
        unsupported(f"handle_torch_function with {args[0]} as its function")
    return call_overrides(tx, public_api, list(args[2:]), dict(kwargs))


@torch_rule(torch._C._disabled_torch_function_impl)
def _disabled_impl(tx, fn, args, kwargs):
    """``torch._C._disabled_torch_function_impl(func, types, args, kwargs)`` called by an
    override: ``func`` with subclass dispatch off, its result as it is (plain tensors)."""
    from .containers import DictVariable

    bound = dict(zip(("func", "types", "args", "kwargs"), args))
    bound.update(kwargs)
    call_args = bound["args"].iterate(tx) if "args" in bound else []
    call_kwargs = bound.get("kwargs")
    keywords = dict(call_kwargs.items) if isinstance(call_kwargs, DictVariable) else {}
    with subclass_dispatch_disabled(tx):
        return bound["func"].call(tx, call_args, keywords)


@torch_rule(torch._C._is_torch_function_enabled)
def _is_torch_function_enabled(tx, fn, args, kwargs):
    subclass_dispatch_enabled(tx)
    return ConstantVariable(tx.torch_function_enabled)


@torch_rule(torch.jit.is_scripting, torch.jit.is_tracing)
def _not_scripting(tx, fn, args, kwargs):
    return ConstantVariable(False)


@torch_rule(torch.compiler.is_compiling, torch.compiler.is_dynamo_compiling, torch._utils.is_compiling)
def _is_compiling(tx, fn, args, kwargs):
    # The code is being compiled, so libraries take their compile-friendly paths, as
    # under torch.compile. The compiled graph never runs this call again.
    return ConstantVariable(True)


@torch_rule(torch.compiler.is_exporting, torch.fx._symbolic_trace.is_fx_tracing)
def _is_exporting(tx, fn, args, kwargs):
    # Capture is neither torch.fx's symbolic tracing nor an ONNX export (the graph never
    # reruns the probe: the answer is fixed for the code being compiled).
    return ConstantVariable(False)


def has_torch_rule(fn) -> bool:
    """Whether ``fn`` has a rule here. ``torch.onnx.is_in_onnx_export``'s rule is added when
    captured code first reaches it: naming it at import would import torch.onnx (~50 ms
    on every compile's path); code that calls it has imported torch.onnx already."""
    if fn in TORCH_FUNCTION_RULES:
        return True
    onnx = sys.modules.get("torch.onnx")
    if onnx is not None and fn is getattr(onnx, "is_in_onnx_export", None):
        TORCH_FUNCTION_RULES[fn] = _is_exporting
        return True
    return False


@torch_rule(torch.is_grad_enabled)
def _is_grad_enabled(tx, fn, args, kwargs):
    return ConstantVariable(tx.grad_enabled)


@torch_rule(torch.get_default_dtype)
def _get_default_dtype(tx, fn, args, kwargs):
    return ConstantVariable(torch.get_default_dtype())


@torch_rule(torch.is_tensor)
def _is_tensor(tx, fn, args, kwargs):
    return ConstantVariable(isinstance(args[0], TensorVariable))


@torch_rule(torch.is_floating_point, torch.is_complex, torch.numel, torch.result_type,
            torch.broadcast_shapes, torch.promote_types, torch.can_cast)
def _metadata_function(tx, fn, args, kwargs):
    def meta(v):
        if isinstance(v, TensorVariable):
            return v.example
        return v.as_constant()
    try:
        value = fn(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
    except Exception as e:
        unsupported(f"{fn.__name__}() raised {type(e).__name__}: {e}")
    return ConstantVariable(value)


def call_pure_torch_class(tx, cls, args, kwargs):
    """torch.device(...), torch.Size(...), torch.finfo(...): values computed now."""
    if not all(a.is_constant() for a in args) or not all(v.is_constant() for v in kwargs.values()):
        unsupported(f"{cls.__qualname__}() with non-constant arguments")
    value = cls(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()})
    if not is_constant_value(value):
        unsupported(f"{cls.__qualname__}() value in compiled code")
    return ConstantVariable(value)


PURE_TORCH_CLASSES = (torch.device, torch.Size, torch.finfo, torch.iinfo, torch.dtype)


TORCH_FUNCTION_RULES.update(DEVICE_RULES)
BUILTIN_RULES[torch._C.TensorBase._make_subclass] = make_subclass
BUILTIN_RULES[torch._C.TensorBase.__new__] = tensor_new
