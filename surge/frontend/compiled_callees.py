"""Calls that a graph break hands to CPython, made through surge.

surge has no frame-evaluation hook: once CPython runs a call, the callee runs
eagerly unless the call itself goes through surge. When capture of an inlined
call fails (a ``print`` inside a helper, a submodule whose forward branches on
a tensor), the caller breaks at that CALL, and the break code calls a compiled
stand-in for the callable instead of the callable itself. The stand-in looks up
the callee's own code cache (same options and backend as the caller), so the
callee is captured, split at its own break and resumed there; a break deeper
down repeats this one level further.

``CompiledCallees.stand_in(obj)`` maps what the user called to what CPython
calls: a Python function to its compiled wrapper (cached per function), a
bound method to the wrapper bound to the same object, an ``nn.Module`` to a
call of its compiled forward with the module's own forward hooks around it,
and a function wrapped by ``@torch.no_grad()`` & co. to the wrapped function
compiled inside that context. Anything else (a builtin, a class, an object
with ``__call__``) is returned unchanged and runs in CPython as written.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import sysconfig
import types
import weakref

import torch

from .codegen import MISS
from .tail_calls import TailCall, finish
from .code_kinds import DECORATE_CONTEXT_CODE


class CompiledCallees:
    """Stand-ins for callables, compiled with one caller's options and backend.

    ``cache_of(code)`` gives a code object's ``CodeCache`` (shared with other
    compiles of the same backend, or private to one ``explain`` run).
    """

    def __init__(self, cache_of, options, backend, records=None):
        self.cache_of = cache_of
        self.options = options
        self.backend = backend
        self.records = records
        self._functions: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def run(self, fn: types.FunctionType, args: tuple, kwargs: dict):
        """``fn(*args, **kwargs)`` through fn's code cache: cached entries first, else a capture."""
        result = self.run_entry(fn, args, kwargs)
        return finish(result) if type(result) is TailCall else result

    def run_entry(self, fn: types.FunctionType, args: tuple, kwargs: dict):
        """``run`` without finishing: the result may be a ``TailCall`` (``tail_calls.py``)."""
        cache = self.cache_of(fn.__code__)
        for run in cache.runners:
            result = run(fn, args, kwargs)
            if result is not MISS:
                return result
        return cache.miss(fn, args, kwargs, self.options, self.backend, self.records)

    def stand_in(self, obj):
        if isinstance(obj, types.FunctionType):
            return self._function(obj) if _compiles(obj) else obj
        if isinstance(obj, types.MethodType) and isinstance(obj.__func__, types.FunctionType):
            return types.MethodType(self._function(obj.__func__), obj.__self__) if _compiles(obj.__func__) else obj
        if isinstance(obj, torch.nn.Module):
            return self._module_call(obj)
        if type(obj) is functools.partial:
            return functools.partial(self.stand_in(obj.func), *obj.args, **obj.keywords)
        return obj

    def _function(self, fn: types.FunctionType):
        found = self._functions.get(fn)
        if found is None:
            if fn.__code__ is DECORATE_CONTEXT_CODE:
                found = self._context_decorated(fn)
            else:
                found = functools.partial(_call_compiled, self.run, fn)
            self._functions[fn] = found
        return found

    def _context_decorated(self, wrapper: types.FunctionType):
        """``@torch.no_grad()``-style wrapper: enter a fresh context like torch's wrapper does,
        and run the wrapped function compiled inside it."""
        cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__))
        factory = cells["ctx_factory"].cell_contents
        inner = self._function(cells["func"].cell_contents)

        def run_in_context(*args, **kwargs):
            with factory():
                return inner(*args, **kwargs)
        return run_in_context

    def _module_call(self, module: torch.nn.Module):
        """What ``module(*args)`` does, with the forward compiled. Global hooks, backward
        hooks and hooks taking keywords keep torch's own ``__call__`` (eager)."""
        from torch.nn.modules import module as module_mod

        if (module_mod._global_forward_hooks or module_mod._global_forward_pre_hooks
                or module_mod._global_backward_hooks or module_mod._global_backward_pre_hooks
                or module._backward_hooks or module._backward_pre_hooks
                or module._forward_hooks_with_kwargs or module._forward_pre_hooks_with_kwargs
                or getattr(module, "_forward_hooks_always_called", None)):
            return module
        forward = module.__dict__.get("forward")  # an instance attribute wins, as in torch's __call__
        if forward is None:
            forward = type(module).forward
            if not isinstance(forward, types.FunctionType):
                return module
            # Compiled wherever it lives: nn.Sequential's own forward splits around a child that breaks.
            forward = types.MethodType(self._function(forward), module)
        else:
            forward = self.stand_in(forward)
        if not module._forward_hooks and not module._forward_pre_hooks:
            return forward
        return functools.partial(_call_with_forward_hooks, module, forward)


# Functions from these folders run as they are: the standard library (``logging``,
# ``functools``), torch's own Python code and surge's markers (``surge.graph_break``).
# Module forwards are compiled wherever they live (``nn.Sequential`` calling a child
# that breaks must split around that child).
# Installed packages that import torch (model libraries) count as user code, though
# site-packages usually sits inside the standard library's folder.
def _folders(*paths) -> tuple:
    return tuple(os.path.realpath(p) + os.sep for p in set(paths))


_PATHS = sysconfig.get_paths()
_STDLIB_DIRS = _folders(_PATHS["stdlib"], _PATHS["platstdlib"])
_PACKAGE_DIRS = _folders(_PATHS["purelib"], _PATHS["platlib"])
_TORCH_AND_SURGE_DIRS = _folders(os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
# surge's bundled models and bench workloads are compiled as user code (as in is_user_code)
_SURGE_USER_DIRS = _folders(*(os.path.join(os.path.dirname(os.path.dirname(__file__)), sub)
                              for sub in ("models", "tools")))


_COMPILES: "weakref.WeakKeyDictionary[types.CodeType, bool]" = weakref.WeakKeyDictionary()


def _compiles(fn: types.FunctionType) -> bool:
    """Not a generator or coroutine function: calling one only makes the object, whose body
    runs later (it is not a frame to capture)."""
    code = fn.__code__
    found = _COMPILES.get(code)
    if found is None:
        found = _COMPILES[code] = code is DECORATE_CONTEXT_CODE or (
            not code.co_flags & _GENERATOR_LIKE and _is_user_file(code.co_filename, fn.__module__))
    return found


_GENERATOR_LIKE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _is_user_file(filename: str, module: str | None) -> bool:
    if filename.startswith("<frozen"):
        return False
    path = os.path.realpath(filename)
    if path.startswith(_SURGE_USER_DIRS):
        return True
    if path.startswith(_TORCH_AND_SURGE_DIRS):
        return False
    if path.startswith(_PACKAGE_DIRS):  # libraries built on torch (model zoos), not numpy & co.
        return _package_uses_torch((module or "").partition(".")[0])
    return not path.startswith(_STDLIB_DIRS)


_PACKAGES_USING_TORCH: dict[str, bool] = {}


def _package_uses_torch(package: str) -> bool:
    """Whether any loaded module of ``package`` imported torch at its top level."""
    found = _PACKAGES_USING_TORCH.get(package)
    if found is None:
        found = _PACKAGES_USING_TORCH[package] = any(
            getattr(mod, "torch", None) is torch for name, mod in list(sys.modules.items())
            if name == package or name.startswith(package + "."))
    return found


def _call_compiled(run, fn, *args, **kwargs):
    return run(fn, args, kwargs)


def _call_with_forward_hooks(module, forward, *args, **kwargs):
    """nn.Module.__call__'s order: pre-hooks may replace the inputs, hooks the output."""
    for hook in list(module._forward_pre_hooks.values()):
        result = hook(module, args)
        if result is not None:
            args = result if isinstance(result, tuple) else (result,)
    output = forward(*args, **kwargs)
    for hook in list(module._forward_hooks.values()):
        result = hook(module, args, output)
        if result is not None:
            output = result
    return output
