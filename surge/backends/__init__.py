"""Backends by name, and the torch.compile backend protocol.

A backend is any callable ``backend(gm: torch.fx.GraphModule, example_inputs: list)
-> callable``; the returned callable takes the graph's inputs as positional
arguments and returns what the graph returns. Names map to surge's own
backends; each layer registers its backend where it is defined, imported lazily
so that ``import surge`` stays cheap.
"""
from __future__ import annotations

import importlib
from typing import Callable

import torch

Backend = Callable[[torch.fx.GraphModule, list], Callable]

# name -> "module:attribute" of the backend, imported on first use.
_LAZY_BACKENDS: dict[str, str] = {
    "eager": "surge.backends.eager:eager_backend",
    "aot_eager": "surge.aot.backend:aot_eager_backend",
    "cpp": "surge.backends.cpp:cpp_backend",
    "triton": "surge.backends.triton:triton_backend",
}
_LOADED: dict[str, Backend] = {}


def register_backend(name: str, target: str) -> None:
    """Register ``name`` as the backend found at ``"module:attribute"``."""
    _LAZY_BACKENDS[name] = target
    _LOADED.pop(name, None)


def available_backends() -> list[str]:
    return sorted(_LAZY_BACKENDS)


def lookup_backend(backend) -> Backend:
    """Turn a backend name or callable into a callable; reject anything else."""
    if backend is None:
        backend = default_backend_name()
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise TypeError(
            f"surge.compile: backend must be a name or a callable, got {type(backend).__name__}"
        )
    if backend not in _LAZY_BACKENDS:
        raise ValueError(
            f"surge.compile: unknown backend {backend!r}; available: {available_backends()}"
        )
    if backend not in _LOADED:
        module_name, attr = _LAZY_BACKENDS[backend].split(":")
        _LOADED[backend] = getattr(importlib.import_module(module_name), attr)
    return _LOADED[backend]


def default_backend_name() -> str:
    # "eager" until a code-generating backend lands; then the device of the
    # graph's inputs picks triton (CUDA) or cpp (CPU).
    return "eager"
