"""``surge.compile``'s result: wrappers that look up the cache on every call.

A compiled function is a thin wrapper: try each cache entry's generated
function, and on a miss capture a new entry. A compiled module is an
``nn.Module`` that shares the original's parameters, buffers, submodules and
``state_dict`` and whose forward is the compiled forward of the original.
"""
from __future__ import annotations

import functools
import types

import torch

from ..backends import lookup_backend
from ..options import Options
from .cache import cache_for
from .codegen import MISS
from .wrappers import compiled_original


def compile_callable(fn_or_module, options: Options, cache_factory=cache_for, records=None):
    """What ``surge.compile`` returns for any callable torch.compile accepts: a module,
    a function or method, an object with a Python ``__call__``, a ``functools.partial``,
    or a builtin, class or other callable (called from a generated Python function)."""
    if isinstance(fn_or_module, torch.nn.Module):
        return CompiledModule(fn_or_module, options, cache_factory, records)
    if isinstance(fn_or_module, functools.partial):
        # The bound arguments are passed on each call: captured, and guarded, as inputs.
        inner = compile_callable(fn_or_module.func, options, cache_factory, records)
        return functools.partial(inner, *fn_or_module.args, **fn_or_module.keywords)
    found = _python_function(fn_or_module)
    if found is None:
        if not callable(fn_or_module):
            raise TypeError(f"surge.compile: expected a callable, got {type(fn_or_module).__qualname__}")
        found = calling_function(fn_or_module), None
    fn, bound_self = found
    call = make_wrapper(fn, options, cache_factory, records)
    if bound_self is None:
        return call

    @functools.wraps(fn_or_module if isinstance(fn_or_module, types.MethodType) else fn)
    def bound_call(*args, **kwargs):
        return call(bound_self, *args, **kwargs)
    bound_call._surge_original = fn_or_module
    return bound_call


def _python_function(obj):
    """(the Python function to capture, the object it is bound to or None), or None
    when ``obj`` runs no Python function of its own (a builtin, a class)."""
    original = compiled_original(obj)
    if original is not None:
        obj = original
    if isinstance(obj, types.FunctionType):
        return obj, None
    if isinstance(obj, types.MethodType) and isinstance(obj.__func__, types.FunctionType):
        return obj.__func__, obj.__self__
    if isinstance(obj, type):
        return None  # calling a class runs type.__call__, whatever the class defines
    call = getattr(type(obj), "__call__", None)
    if isinstance(call, types.FunctionType):
        return call, obj
    return None


def calling_function(target) -> types.FunctionType:
    """A Python function calling ``target``, so that capture starts in Python code.

    Named after the target; its code object carries the target's name as a constant,
    so wrappers of different targets keep different caches (a call is served only by
    entries whose guard on the closure's target holds, in any case)."""
    def call(*args, **kwargs):
        return target(*args, **kwargs)

    if isinstance(target, (type, types.BuiltinFunctionType)):
        name, where = target.__qualname__, f"{getattr(target, '__module__', None)}.{target.__qualname__}"
    else:
        name, where = type(target).__qualname__, f"{type(target).__qualname__} object at {id(target):#x}"
    code = call.__code__
    code = code.replace(co_name=name.rpartition(".")[2], co_qualname=name,
                        co_consts=code.co_consts + (f"surge.compile calling {where}",))
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def make_wrapper(fn: types.FunctionType, options: Options, cache_factory, records=None):
    backend = lookup_backend(options.backend, options)
    cache = cache_factory(fn.__code__, backend, options.fullgraph)
    runners = cache.runners

    @functools.wraps(fn)
    def surge_compiled(*args, **kwargs):
        for run in runners:
            result = run(fn, args, kwargs)
            if result is not MISS:
                return result
        return cache.miss(fn, args, kwargs, options, backend, records)

    surge_compiled._surge_original = fn
    surge_compiled._surge_cache = cache
    return surge_compiled


class CompiledModule(torch.nn.Module):
    """A module whose forward is compiled; everything else is the original module's."""

    _OWN_ATTRIBUTES = ("_orig_mod", "_compiled_forward")

    def __init__(self, module: torch.nn.Module, options: Options, cache_factory=cache_for, records=None):
        super().__init__()
        object.__setattr__(self, "_orig_mod", module)
        # Share the tables state_dict(), parameters(), to(), ... walk, so both
        # modules always see the same tensors and submodules, with the same names.
        for table in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
            object.__setattr__(self, table, module.__dict__[table])
        if "forward" in module.__dict__:
            found = _python_function(module.__dict__["forward"])
            if found is None:
                raise TypeError(f"surge.compile: the forward set on this {type(module).__qualname__} "
                                "is not a Python function or method")
            fn, bound_self = found
        else:
            fn, bound_self = type(module).forward, module
        call = make_wrapper(fn, options, cache_factory, records)
        object.__setattr__(self, "_compiled_forward",
                           call if bound_self is None else functools.partial(call, bound_self))

    @property
    def training(self):
        return self._orig_mod.training

    @training.setter
    def training(self, mode):
        # nn.Module.__init__ sets this before _orig_mod exists.
        if "_orig_mod" in self.__dict__:
            self._orig_mod.training = mode

    def forward(self, *args, **kwargs):
        original = self._orig_mod
        if original._forward_pre_hooks or original._forward_hooks:
            return self._forward_with_hooks(original, args, kwargs)
        return self._compiled_forward(*args, **kwargs)

    def _forward_with_hooks(self, original, args, kwargs):
        """The original module's own hooks run around the compiled forward, as eager runs them."""
        if original._forward_hooks_with_kwargs or original._forward_pre_hooks_with_kwargs:
            return original(*args, **kwargs)
        for hook in list(original._forward_pre_hooks.values()):
            result = hook(original, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        output = self._compiled_forward(*args, **kwargs)
        for hook in list(original._forward_hooks.values()):
            result = hook(original, args, output)
            if result is not None:
                output = result
        return output

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_orig_mod"], name)

    def __setattr__(self, name, value):
        if name in self._OWN_ATTRIBUTES or name == "training" or "_orig_mod" not in self.__dict__:
            return super().__setattr__(name, value)
        setattr(self._orig_mod, name, value)

    def __delattr__(self, name):
        delattr(self._orig_mod, name)
