"""The public entry points: surge.compile, surge.reset, surge.explain, surge.graph_break."""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import torch

from .frontend.markers import graph_break
from .options import Options

# Values of `mode` and `dynamic` that are implemented. Anything else is refused
# with a clear error rather than silently ignored.
SUPPORTED_MODES = (None, "default")
SUPPORTED_DYNAMIC = (None, False)


def compile(
    fn_or_module: Callable | torch.nn.Module | None = None,
    *,
    backend: str | Callable | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
):
    """Compile a function or ``nn.Module``; usable as ``@surge.compile`` or ``@surge.compile(...)``."""
    if fn_or_module is None:
        return functools.partial(
            compile, backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode, options=options
        )
    opts = build_options(backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode, options=options)
    from .frontend.entry import compile_callable
    from .frontend.lazy_dynamo import defer_dynamo_import

    defer_dynamo_import()  # capture runs torch's meta functions: keep them from importing Dynamo

    return compile_callable(fn_or_module, opts)


def build_options(*, backend, fullgraph, dynamic, mode, options) -> Options:
    if mode not in SUPPORTED_MODES:
        raise ValueError(
            f"surge.compile: mode={mode!r} is not implemented yet; supported modes: {SUPPORTED_MODES}"
        )
    if dynamic not in SUPPORTED_DYNAMIC:
        raise ValueError(
            f"surge.compile: dynamic={dynamic!r} is not implemented yet: surge specializes on "
            "every shape and recompiles when one changes (use dynamic=None or False)"
        )
    from .backends import lookup_backend

    if backend is not None:
        lookup_backend(backend)  # fail now, at the user's call site, on a bad name
    opts = Options.from_env().with_user_options(options)
    return opts.replace(backend=backend, fullgraph=bool(fullgraph), dynamic=dynamic, mode=mode)


def reset() -> None:
    """Drop every in-memory cache entry. The next call of each compiled function runs a
    capture stored on disk whose guards pass (``SURGE_FRONTEND_CACHE=0``: none), else
    captures again."""
    from .frontend.cache import reset_all

    reset_all()


def explain(fn_or_module, *, backend=None, options: Mapping[str, Any] | None = None):
    """``surge.explain(fn)(*args, **kwargs)`` runs one call and reports what capture produced:
    graphs, guards, ops per graph, and why frames ran eagerly (with the user's file:line)."""
    opts = build_options(backend=backend, fullgraph=False, dynamic=None, mode=None, options=options)
    from .frontend.explain import explain as explain_impl

    return explain_impl(fn_or_module, opts)
