"""``surge.compile``'s result: wrappers that look up the cache on every call.

A compiled function is a thin wrapper: try each cache entry's generated
function, and on a miss capture a new entry. A compiled module is an
``nn.Module`` that shares the original's parameters, buffers, submodules and
``state_dict`` and whose forward is the compiled forward of the original.

Both pickle (``pickle``, ``torch.save``) as what they compile plus the options,
and come back compiled, with empty caches: the first call after loading
compiles again (or runs a capture kept on disk). Caches and compiled graphs
belong to a process and are never pickled.
"""
from __future__ import annotations

import functools
import importlib
import pickle
import types

import torch

from ..backends import lookup_backend
from ..options import Options
from .cache import cache_for
from .codegen import MISS
from .tail_calls import TailCall, finish
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
    call = CompiledFunction(fn, options, cache_factory, records)
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


class CompiledFunction:
    """``surge.compile(fn)``: each call tries the cache's entries, a miss captures one.

    It looks like ``fn`` (name, doc, ``__wrapped__``) and binds as a method when it is
    a class attribute, as a function does."""

    def __init__(self, fn: types.FunctionType, options: Options, cache_factory=cache_for, records=None):
        self._surge_original = fn
        self._surge_options = options
        self._backend = lookup_backend(options.backend, options)
        self._surge_cache = cache_factory(fn.__code__, self._backend, options.fullgraph)
        self._runners = self._surge_cache.runners  # read on every call: the hot path
        self._records = records
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        fn = self._surge_original
        for run in self._runners:
            result = run(fn, args, kwargs)
            if result is not MISS:
                return finish(result) if type(result) is TailCall else result
        result = self._surge_cache.miss(fn, args, kwargs, self._surge_options, self._backend, self._records)
        return finish(result) if type(result) is TailCall else result

    def __get__(self, instance, owner=None):
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self):
        return f"<surge-compiled function {self._surge_original.__qualname__}>"

    def __reduce__(self):
        # Functions pickle by reference (module and name). A decorated function is
        # found under its name as this object itself; a function compiled under
        # another name is stored as the function plus the options, compiled again on load.
        fn = self._surge_original
        found = _find_by_name(fn)
        if found is self:
            return fn.__qualname__
        if found is fn:
            return _compiled_again, (fn, self._surge_options)
        code = fn.__code__
        raise pickle.PicklingError(
            f"cannot pickle the surge-compiled function {fn.__qualname__} ({code.co_filename}:"
            f"{code.co_firstlineno}): pickle stores a function by its module and name, and "
            f"{fn.__module__}.{fn.__qualname__} is neither this function nor the one it compiles "
            "(a lambda, a nested function, or a name bound to something else)")


def _find_by_name(fn):
    """What ``fn``'s module and qualified name lead to in this process, or None."""
    if "<locals>" in fn.__qualname__ or "<lambda>" in fn.__qualname__:
        return None
    try:
        obj = importlib.import_module(fn.__module__)
        for part in fn.__qualname__.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, TypeError):
        return None
    return obj


def _compiled_again(fn_or_module, options: Options):
    """What a pickled compiled function or module loads as: compiled again, same options."""
    from .lazy_dynamo import defer_dynamo_import

    defer_dynamo_import()  # as surge.compile does
    return compile_callable(fn_or_module, options)


class CompiledModule(torch.nn.Module):
    """A module whose forward is compiled; everything else is the original module's."""

    _OWN_ATTRIBUTES = ("_orig_mod", "_compiled_forward", "_surge_options")

    def __init__(self, module: torch.nn.Module, options: Options, cache_factory=cache_for, records=None):
        super().__init__()
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_surge_options", options)
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
        call = CompiledFunction(fn, options, cache_factory, records)
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

    def __reduce__(self):
        # The original module (parameters, buffers, submodules) and the options;
        # loading compiles it again, as torch.compile's wrapper does.
        return _compiled_again, (self._orig_mod, self._surge_options)
