"""Calling a class during capture: what object the trace builds."""
from __future__ import annotations

import collections
import contextlib
import enum
import functools
import inspect
import itertools
import sys
import types

import torch

from .base import raise_in_user_code, unsupported
from .builtins import BUILTIN_RULES, fold
from .constant import ConstantVariable, is_numpy_scalar_type
from .containers import DictVariable, TupleVariable
from .dict_storage import is_dict_storage_class
from .autocast import AUTOCAST_CLASSES, construct_autocast
from .contexts import GRAD_MODE_CLASSES, PROFILER_CLASSES, ProfilerContextVariable, make_grad_context
from .objects import NewObjectVariable, bind_class_attribute, static_lookup, _MISSING
from .torch_fns import PURE_TORCH_CLASSES, call_pure_torch_class
from .torch_function import DISABLE_CLASSES, DisableTorchFunctionContextVariable


def _null_context(tx, enter_result=None):
    from .contexts import NullContextVariable

    return NullContextVariable(enter_result if enter_result is not None else ConstantVariable(None))


def _exit_stack(tx):
    from .exit_stacks import ExitStackVariable

    return ExitStackVariable(made_at=tx.current_frame.root_split_point())


def _ordered_dict(tx, other=None, **kwargs):
    d = BUILTIN_RULES[dict](tx, *([other] if other is not None else []), **kwargs)
    d.cls = collections.OrderedDict
    return d


def _default_dict(tx, factory=None, *rest, **kwargs):
    d = BUILTIN_RULES[dict](tx, *rest, **kwargs)
    d.cls = collections.defaultdict
    no_factory = factory is None or factory.is_constant() and factory.as_constant() is None
    d.default_factory = None if no_factory else factory
    return d


def _chain(tx, *iterables):
    from .iterators import ChainIterator

    return ChainIterator(tx, list(iterables))


def _partial(tx, fn, *args, **kwargs):
    from .functions import PartialVariable

    if isinstance(fn, PartialVariable) and fn.source is None:
        # CPython flattens partial(partial(f, a), b) into partial(f, a, b) (the inner one,
        # made in the trace, has no attributes of its own).
        return PartialVariable(fn.fn, [*fn.args, *args], {**fn.kwargs, **kwargs})
    return PartialVariable(fn, list(args), dict(kwargs))


# Library classes whose instances the trace models directly.
CLASS_RULES = {
    contextlib.nullcontext: _null_context,
    contextlib.ExitStack: _exit_stack,
    collections.OrderedDict: _ordered_dict,
    collections.defaultdict: _default_dict,
    functools.partial: _partial,
    itertools.chain: _chain,
}


def construct(tx, class_var, args, kwargs):
    cls = class_var.cls
    if cls in BUILTIN_RULES:
        return BUILTIN_RULES[cls](tx, *args, **kwargs)
    if cls in CLASS_RULES:
        return CLASS_RULES[cls](tx, *args, **kwargs)
    if cls in GRAD_MODE_CLASSES:
        return make_grad_context(tx, cls, args)
    if cls in PROFILER_CLASSES:
        if not (all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values())):
            unsupported(f"{cls.__qualname__}() with non-constant arguments")
        return ProfilerContextVariable(cls, list(args), dict(kwargs))
    if cls in AUTOCAST_CLASSES:
        return construct_autocast(tx, cls, args, kwargs)
    if cls in PURE_TORCH_CLASSES:
        return call_pure_torch_class(tx, cls, args, kwargs)
    if is_numpy_scalar_type(cls) and all(a.is_constant() for a in args) and not kwargs:
        return ConstantVariable(fold(cls, args))
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        if len(args) != 1 or kwargs:  # Enum('Name', names, ...): the functional API makes a new class
            unsupported(f"{cls.__qualname__}() making a new enum class in compiled code")
        return ConstantVariable(cls(args[0].as_constant()))  # a member, looked up by value
    if issubclass(cls, torch.nn.Module):
        from .frame_modules import construct_module

        return construct_module(tx, cls, args, kwargs)
    if issubclass(cls, BaseException):
        from .exceptions import construct_exception

        return construct_exception(tx, cls, list(args), dict(kwargs))
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return _namedtuple(tx, cls, args, kwargs)
    if issubclass(cls, torch.Tensor):
        if cls is torch.Tensor:
            unsupported("constructing torch.Tensor directly")
        from .tensor_subclasses import construct_subclass

        return construct_subclass(tx, cls, list(args), dict(kwargs))
    if cls in DISABLE_CLASSES:
        return DisableTorchFunctionContextVariable(cls)
    if cls is object:
        if args or kwargs:
            unsupported("object() takes no arguments")
        return NewObjectVariable(object)
    if type(cls).__call__ is not type.__call__:
        unsupported(f"constructing {cls.__qualname__} (its metaclass defines __call__) in compiled code")
    storage = None
    if is_dict_storage_class(cls) and cls.__module__ not in ("builtins", "collections"):
        storage = DictVariable({}, cls=dict)
    elif cls.__new__ is not object.__new__ or cls.__module__ in ("builtins",):
        unsupported(f"constructing {cls.__qualname__} (a class with its own __new__) in compiled code")
    if getattr(cls, "__abstractmethods__", None):
        # object.__new__'s check of an ABC (abc.ABC and every abc.ABCMeta class).
        missing = sorted(cls.__abstractmethods__)
        plural = "s" if len(missing) > 1 else ""
        if sys.version_info >= (3, 12):
            message = (f"Can't instantiate abstract class {cls.__name__} without an implementation for "
                       f"abstract method{plural} {', '.join(repr(m) for m in missing)}")
        else:
            message = f"Can't instantiate abstract class {cls.__name__} with abstract method{plural} {', '.join(missing)}"
        raise_in_user_code(TypeError, message)
    if cls.__dictoffset__ == 0:
        # Only __slots__ all the way down leaves instances without a __dict__ (an empty
        # __slots__ on an abstract base, as collections.abc has, does not).
        unsupported(f"constructing {cls.__qualname__} (a class with __slots__) in compiled code")
    obj = NewObjectVariable(cls, storage)
    init = static_lookup(cls, "__init__")
    if init is not _MISSING and init is not object.__init__:
        if storage is not None and not isinstance(init, types.FunctionType):
            obj.getattr(tx, "__init__").call(tx, args, kwargs)
            return obj
        if not isinstance(init, types.FunctionType):
            unsupported(f"{cls.__qualname__}.__init__ is not Python code")
        bind_class_attribute(tx, obj, cls, "__init__", init).call(tx, args, kwargs)
    elif args or kwargs:
        unsupported(f"{cls.__qualname__}() takes no arguments")
    return obj


def _namedtuple(tx, cls, args, kwargs):
    params = list(inspect.signature(cls).parameters)
    values = dict(zip(params, args))
    values.update(kwargs)
    defaults = getattr(cls, "_field_defaults", {})
    items = []
    for field in cls._fields:
        if field in values:
            items.append(values[field])
        elif field in defaults:
            items.append(tx.wrap(defaults[field], None))
        else:
            unsupported(f"{cls.__qualname__}() missing field {field!r}")
    return TupleVariable(items, cls=cls)
