"""The public entry points: surge.compile, surge.reset, surge.explain, surge.graph_break."""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import torch

from .frontend.markers import graph_break
from .options import Options


def cudagraph_mark_step_begin() -> None:
    """Mark the start of a new iteration (a training step, a decoding step) for functions
    compiled with ``mode="reduce-overhead"``: every output that a CUDA graph replay handed
    out before this call is overwritten by the next replay, and reading one from now on
    raises (``clone()`` an output to keep it; docs/backend.md, "CUDA graphs")."""
    from .backends.cudagraphs import mark_step_begin

    mark_step_begin()

# Values of `mode` and `dynamic` that are implemented. Anything else is refused
# with a clear error rather than silently ignored. What each mode turns on is
# ``options.MODES``.
SUPPORTED_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
SUPPORTED_DYNAMIC = (None, False, True)


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
    from .backends import lookup_backend

    opts = Options.from_env().with_user_options(options)
    # The keywords and the same names in ``options`` are one setting: a keyword left at its
    # default keeps what ``options`` says, two different values are an error.
    given = {"backend": backend, "fullgraph": fullgraph or None, "dynamic": dynamic, "mode": mode}
    for name, value in given.items():
        if value is not None and name in (options or {}) and options[name] != value:
            raise ValueError(f"surge.compile: {name}={value!r} and options[{name!r}]={options[name]!r} disagree")
    opts = opts.replace(**{name: value for name, value in given.items() if value is not None})
    if opts.mode not in SUPPORTED_MODES:
        raise ValueError(
            f"surge.compile: mode={opts.mode!r} is not a mode; modes: {SUPPORTED_MODES}"
        )
    if opts.dynamic not in SUPPORTED_DYNAMIC:
        raise ValueError(
            f"surge.compile: dynamic={opts.dynamic!r}: use None (sizes that change become symbolic), "
            "True (every size symbolic) or False (every size static)"
        )
    if opts.backend is not None:
        lookup_backend(opts.backend)  # fail now, at the user's call site, on a bad name
    return opts.replace(fullgraph=bool(opts.fullgraph)).with_mode()


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


def mark_dynamic(tensor: torch.Tensor, dim, min: int | None = None, max: int | None = None) -> None:
    """Compile dimension ``dim`` (an int or a list of them) of ``tensor`` symbolically from
    the first capture, for sizes in ``[min, max]``; a call with a size outside the range
    recompiles (static for that size, logged under ``SURGE_LOGS=dynamic``). Sets the
    attributes torch's ``torch._dynamo.mark_dynamic`` sets, so either is honoured."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(tensor, "_dynamo_dynamic_indices", ()) or ())
    tensor._dynamo_dynamic_indices = marked | set(dims)
    if min is not None or max is not None:
        ranges = dict(getattr(tensor, "_surge_dynamic_range", {}) or {})
        for d in dims:
            ranges[d] = (min, max)
        tensor._surge_dynamic_range = ranges


def maybe_mark_dynamic(tensor: torch.Tensor, dim) -> None:
    """Like ``mark_dynamic``, as a hint: the dimension is symbolic unless the graph needs it
    to be a number (then it is specialized, without an error)."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    tensor._dynamo_weak_dynamic_indices = set(getattr(tensor, "_dynamo_weak_dynamic_indices", ()) or ()) | set(dims)


def mark_static(tensor: torch.Tensor, dim=None) -> None:
    """Never make dimension ``dim`` (default: every dimension) of ``tensor`` symbolic."""
    dims = range(tensor.dim()) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    tensor._dynamo_static_indices = set(getattr(tensor, "_dynamo_static_indices", ()) or ()) | set(dims)
