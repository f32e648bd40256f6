"""Backends by name, and the torch.compile backend protocol.

A backend is any callable ``backend(gm: torch.fx.GraphModule, example_inputs: list)
-> callable``; the returned callable takes the graph's inputs as positional
arguments and returns what the graph returns. Names map to surge's own
backends; each layer registers its backend where it is defined, imported lazily
so that ``import surge`` stays cheap. surge's own backends also take the
``options=`` keyword: ``lookup_backend(name, options)`` binds it, so the options
of ``surge.compile`` reach every layer (a user's callable is used as given).
"""
from __future__ import annotations

import functools
import importlib
import inspect
from typing import Callable

import torch

from ..errors import InvalidBackend

Backend = Callable[[torch.fx.GraphModule, list], Callable]

# What every error about a backend that breaks the protocol says.
PROTOCOL = ("a backend is called as backend(gm: torch.fx.GraphModule, example_inputs: list) and returns "
            "a callable that runs the graph on its inputs (gm.forward runs it as captured)")

# name -> "module:attribute" of the backend, imported on first use.
_LAZY_BACKENDS: dict[str, str] = {
    "default": "surge.backends.default:default_backend",
    "eager": "surge.backends.eager:eager_backend",
    "aot_eager": "surge.aot.backend:aot_eager_backend",
    "cpp": "surge.backends.cpp:cpp_backend",
    "triton": "surge.backends.triton:triton_backend",
}
_LOADED: dict[str, Backend] = {}
_BOUND: dict[tuple, Backend] = {}


def register_backend(name: str, target: str) -> None:
    """Register ``name`` as the backend found at ``"module:attribute"``."""
    _LAZY_BACKENDS[name] = target
    _LOADED.pop(name, None)
    for key in [k for k in _BOUND if k[0] == name]:
        del _BOUND[key]


def available_backends() -> list[str]:
    return sorted(_LAZY_BACKENDS)


def lookup_backend(backend, options=None) -> Backend:
    """Turn a backend name or callable into a callable; reject anything else.

    For surge's own backends (named), ``options`` is bound as their ``options=``
    keyword."""
    if backend is None:
        backend = default_backend_name()
    if callable(backend):
        _check_signature(backend)
        return backend
    if not isinstance(backend, str):
        raise InvalidBackend(
            f"surge.compile: backend must be a name or a callable, got {type(backend).__name__} "
            f"{_short_repr(backend)}; {PROTOCOL}; names: {available_backends()}"
        )
    if backend not in _LAZY_BACKENDS:
        raise ValueError(
            f"surge.compile: unknown backend {backend!r}; available: {available_backends()}"
        )
    if backend not in _LOADED:
        module_name, attr = _LAZY_BACKENDS[backend].split(":")
        _LOADED[backend] = getattr(importlib.import_module(module_name), attr)
    loaded = _LOADED[backend]
    if options is None:
        return loaded
    # One bound backend per (name, options): the frontend keys its caches by
    # backend identity, so two compiles with the same options share entries.
    key = (backend, options)
    if key not in _BOUND:
        _BOUND[key] = functools.partial(loaded, options=options)
    return _BOUND[key]


def _check_signature(backend) -> None:
    """Refuse, at ``surge.compile``, a callable that cannot take ``(gm, example_inputs)``."""
    try:
        signature = inspect.signature(backend)
    except (TypeError, ValueError):  # a builtin without a signature: its first call tells
        return
    try:
        signature.bind(None, None)
    except TypeError as why:
        raise InvalidBackend(f"surge.compile: backend {describe_backend(backend)} cannot be called as "
                             f"backend(gm, example_inputs): its signature is {signature} ({why}); "
                             f"{PROTOCOL}") from None


def describe_backend(backend) -> str:
    """The backend's name for messages: its registered name, or the callable's qualified name."""
    target = backend.func if isinstance(backend, functools.partial) else backend
    for name, loaded in _LOADED.items():
        if loaded is target:
            return repr(name)
    if isinstance(target, str):
        return repr(target)
    name = getattr(target, "__qualname__", None)
    if name is None:
        name = f"{type(target).__qualname__} object"
    module = getattr(target, "__module__", None) or getattr(type(target), "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else name


def _short_repr(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def default_backend_name() -> str:
    # Generated kernels for the graph's device: triton for CUDA, cpp for CPU.
    return "default"


def before_capture(backend, args: tuple) -> None:
    """Tell a backend that a frame is about to be captured for a call with ``args``, so
    that it can start slow preparations (the Triton backend's compile workers) while
    capture runs; a backend opts in with a ``before_capture(args)`` attribute."""
    target = backend.func if isinstance(backend, functools.partial) else backend
    hook = getattr(target, "before_capture", None)
    if hook is not None:
        hook(args)
