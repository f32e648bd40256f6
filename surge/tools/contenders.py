"""The contenders the bench runs side by side: eager, torch.compile and surge, the
two compilers also in their CUDA graph mode (``torch.compile:reduce-overhead`` and
``surge:reduce-overhead``: ``--contenders eager,torch.compile,torch.compile:reduce-overhead,surge:reduce-overhead``).

Each is a way to turn a workload's target into a callable. A contender that
cannot run here (surge's frontend or the chosen backend not built yet, no
working C++ compiler for torch.compile, ...) raises ``NotAvailable`` with the
reason, which the table shows instead of crashing.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

CONTENDERS = ("eager", "torch.compile", "surge", "torch.compile:reduce-overhead", "surge:reduce-overhead")
# The compile modes a contender's name may carry after a colon.
MODES = ("reduce-overhead", "max-autotune")


def base_name(contender: str) -> str:
    """``surge:reduce-overhead`` -> ``surge``: the compiler, whatever its mode."""
    return contender.split(":", 1)[0]


class NotAvailable(Exception):
    """This contender cannot run here; the message says why."""


@dataclasses.dataclass(frozen=True)
class Contender:
    name: str
    compile: Callable  # target -> callable


def eager_contender() -> Contender:
    return Contender("eager", lambda target: target)


def torch_compile_contender(mode: str | None = None) -> Contender:
    import torch

    def compile_with_torch(target):
        return torch.compile(target, mode=mode)  # default mode: the peer surge is measured against

    return Contender("torch.compile" + (f":{mode}" if mode else ""), compile_with_torch)


def surge_contender(backend: str | None, mode: str | None = None) -> Contender:
    try:
        import surge
        from surge.frontend import entry  # noqa: F401  (the capture frontend must exist)
    except ImportError as e:
        raise NotAvailable(f"surge.compile is not available yet ({e})") from None
    try:
        from surge.backends import lookup_backend

        lookup_backend(backend)
    except (ValueError, ImportError, AttributeError) as e:
        raise NotAvailable(f"surge backend {backend!r} is not available ({e})") from None

    def compile_with_surge(target):
        return surge.compile(target, backend=backend, mode=mode)

    return Contender("surge" + (f":{mode}" if mode else ""), compile_with_surge)


def make_contender(name: str, surge_backend: str | None) -> Contender:
    base, _, mode = name.partition(":")
    if mode and mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} in contender {name!r}; modes: {MODES}")
    if base == "eager" and not mode:
        return eager_contender()
    if base == "torch.compile":
        return torch_compile_contender(mode or None)
    if base == "surge":
        return surge_contender(surge_backend, mode or None)
    raise ValueError(f"unknown contender {name!r}; one of {CONTENDERS}")


def surge_backend_label(backend: str | None) -> str:
    """The backend surge actually uses when ``backend`` is None: its default's name."""
    if callable(backend):
        return getattr(backend, "__name__", type(backend).__name__)
    if backend is not None:
        return backend
    try:
        from surge.backends import default_backend_name

        return f"default ({default_backend_name()})"
    except (ImportError, TypeError):
        # The default may come to depend on the inputs' device; then say just "default".
        return "default"
