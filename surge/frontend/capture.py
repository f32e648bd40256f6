"""Capturing one call: bind the arguments, run the bytecode, build graph and entry.

``capture_call`` is what a cache miss runs. It returns a ``CacheEntry`` whose
generated function serves later calls that pass the same guards: either a
compiled graph, or (when the frame cannot be captured) a recorded decision to
run the function eagerly.
"""
from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

import torch

from .. import logs
from ..counters import counters
from ..errors import BackendCompilerFailed, InternalError, Unsupported
from ..tools.debug_dir import source_of, write_current
from ..tools.phases import phase_timer
from .codegen import EntryCodegen, generate_diagnosis, generate_entry
from .interpreter import Frame
from .reconstruct import ReturnCodegen, collect_tensor_outputs
from .binding import bind_root
from .sources import ClosureSource, ConstTable, RootFunctionSource
from .tracer import DECORATE_CONTEXT_CODE, Tracer
from .variables.functions import CellVariable, UserFunctionVariable


@dataclass
class BreakReason:
    reason: str
    location: str | None
    source_line: str = ""

    def __str__(self):
        return f"{self.reason}\n    at {self.location}" if self.location else self.reason


@dataclass
class CacheEntry:
    run: object                      # generated fn(fn, args, kwargs) -> result or MISS
    source: str                      # its Python source
    guards_text: str
    diagnose: object                 # fn(fn, args, kwargs) -> text of first failing guard
    graph: torch.fx.GraphModule | None = None
    fallback: BreakReason | None = None
    compile_seconds: float = 0.0


def _root_cells(fn) -> dict:
    code = fn.__code__
    return {name: CellVariable(lazy=(cell, ClosureSource(RootFunctionSource(), i, name)))
            for i, (name, cell) in enumerate(zip(code.co_freevars, fn.__closure__ or ()))}


def _run_context_decorated(tracer: Tracer, fn, frame: Frame):
    """The root function is torch's @no_grad()-style wrapper: capture the wrapped function."""
    args = frame.load_local("args")
    kwargs = frame.load_local("kwargs")
    tracer.current_frame = frame
    try:
        return tracer.call_context_decorated(UserFunctionVariable(fn, RootFunctionSource()),
                                             args.items, dict(kwargs.items))
    finally:
        tracer.current_frame = None


def _timed_compile(capture):
    """One compile record per captured call, named after the user's function and
    file:line: ``explain``, the bench and SURGE_DEBUG_DIR's folders follow it."""
    @functools.wraps(capture)
    def timed(fn, *rest):
        code = fn.__code__
        name = f"{fn.__qualname__} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
        with phase_timer.compile(name), phase_timer.phase("capture"):
            return capture(fn, *rest)
    return timed


@_timed_compile
def capture_call(fn, args: tuple, kwargs: dict, options, backend) -> CacheEntry:
    """Capture ``fn(*args, **kwargs)``; never raises unless fullgraph/raise_internal_errors ask."""
    start = time.perf_counter()
    tracer = Tracer(options)
    grad_before = torch.is_grad_enabled()
    tracer.guards.global_state(grad_before, torch.get_default_dtype())
    try:
        try:
            frame = Frame(tracer, fn.__code__, fn.__globals__, bind_root(tracer, fn, args, kwargs),
                          _root_cells(fn), name=fn.__qualname__)
            if fn.__code__ is DECORATE_CONTEXT_CODE:
                result = _run_context_decorated(tracer, fn, frame)
            else:
                result = frame.run()
            return _finish(tracer, fn, result, options, backend, start)
        finally:
            torch._C._set_grad_enabled(grad_before)
    except Unsupported as e:
        if options.fullgraph:
            raise
        return _fallback(tracer, fn, e, start)
    except BackendCompilerFailed as e:
        if options.fullgraph:
            raise
        return _fallback(tracer, fn, Unsupported(f"backend failed: {e}"), start)
    except Exception as e:
        if options.raise_internal_errors:
            raise
        where = tracer.current_frame
        location = f"{where.code.co_filename}:{where.lineno()}" if where is not None else None
        if options.fullgraph:
            raise InternalError(f"surge failed while capturing {fn.__qualname__}: "
                                f"{type(e).__name__}: {e}" + (f"\n  at {location}" if location else "")) from e
        return _fallback(tracer, fn, Unsupported(f"internal error: {type(e).__name__}: {e}", location), start)


def _finish(tracer: Tracer, fn, result, options, backend, start) -> CacheEntry:
    outputs: list = []
    seen: set = set()
    collect_tensor_outputs(result, outputs, seen)
    for value in tracer.side_effects.values():
        collect_tensor_outputs(value, outputs, seen)
    builder = tracer.graph
    # Every successful capture hands a graph to the backend, even one without ops
    # (a function that only rearranges its inputs): counts stay predictable.
    builder.output([o.node for o in outputs])
    output_index = {o.node: i for i, o in enumerate(outputs)}
    # Fail (and fall back) on an unreturnable value before the backend sees the graph.
    ReturnCodegen(EntryCodegen(ConstTable()), output_index).expr(result)
    gm = builder.graph_module()
    example_inputs = [real for _, real in builder.inputs]
    if logs.enabled("graph"):
        logs.log("graph", f"captured graph of {fn.__qualname__}:\n{gm.print_readable(print_output=False)}")
    write_current(options, "source.py", source_of(fn))
    write_current(options, "graph.py", gm.print_readable(print_output=False))
    try:
        with phase_timer.phase("other"):  # the backend times its own phases; the rest is not capture
            compiled = backend(gm, example_inputs)
    except Exception as e:
        raise BackendCompilerFailed(f"backend {getattr(backend, '__name__', backend)} raised "
                                    f"{type(e).__name__}: {e}") from e
    counters["graphs"] += 1
    input_sources = [source for source, _ in builder.inputs]
    source, run = generate_entry(
        tracer.guards, tracer.consts, input_sources=input_sources,
        return_expr=lambda cg: ReturnCodegen(cg, output_index).expr(result),
        effects=lambda cg: tracer.side_effects.statements(cg, ReturnCodegen(cg, output_index).expr),
        compiled=compiled, counters=counters,
    )
    entry = CacheEntry(run, source, tracer.guards.render(), _lazy_diagnosis(tracer),
                       graph=gm, compile_seconds=time.perf_counter() - start)
    write_current(options, "guards.txt", entry.guards_text)
    _log_entry(fn, entry)
    return entry


def _fallback(tracer: Tracer, fn, error: Unsupported, start) -> CacheEntry:
    counters["fallbacks"] += 1
    reason = BreakReason(error.reason, error.location, getattr(error, "source_text", "") or "")
    logs.log("fallbacks", f"{fn.__qualname__} runs eagerly: {reason}")
    source, run = generate_entry(tracer.guards, tracer.consts, input_sources=[], return_expr=None,
                                 run_eagerly=True, counters=counters)
    entry = CacheEntry(run, source, tracer.guards.render(), _lazy_diagnosis(tracer),
                       fallback=reason, compile_seconds=time.perf_counter() - start)
    _log_entry(fn, entry)
    return entry


def _lazy_diagnosis(tracer: Tracer):
    """The per-guard diagnosis function, generated on the first miss that needs it.
    (It keeps the guards and constants only, not the tracer and its example inputs.)"""
    guards, consts, made = tracer.guards, tracer.consts, []

    def diagnose(fn, args, kwargs):
        if not made:
            made.append(generate_diagnosis(guards, consts))
        return made[0](fn, args, kwargs)
    return diagnose


def _log_entry(fn, entry: CacheEntry) -> None:
    if logs.enabled("guards"):
        logs.log("guards", f"guards of {fn.__qualname__}:\n{entry.guards_text}")
    if logs.enabled("bytecode"):
        logs.log("bytecode", f"entry function of {fn.__qualname__}:\n{entry.source}")
