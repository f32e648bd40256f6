"""Capturing one call: bind the arguments, run the bytecode, build graph and entry.

``capture_call`` is what a cache miss runs. It returns a ``CacheEntry`` whose
generated function serves later calls that pass the same guards: a compiled
graph; a graph of the frame up to a graph break, followed by the break code
(``breaks.py``); or, when the frame can be neither captured nor split, a
recorded decision to run the function eagerly.
"""
from __future__ import annotations

import contextlib
import dis
import functools
import os
import time
import weakref
from dataclasses import dataclass

import torch

from .. import fallbacks, logs
from ..counters import counters
from ..errors import BackendCompilerFailed, InternalError, Unsupported
from ..observe.debug_dir import source_of, write_current
from ..observe.phases import phase_timer
from . import disk_cache
from .backend_call import call_backend
from .binding import bind_root
from .breaks import (
    BreakRunner, BreakState, BreakStateCodegen, ResumeCaller, collect_state_outputs, grad_mode_outside_blocks,
    open_device_blocks,
)
from .cache_entry import BreakReason, CacheEntry
from .code_kinds import DECORATE_CONTEXT_CODE, is_resume_code
from .codegen import EntryCodegen, generate_diagnosis, generate_entry
from .dynamic_dims import DynamicDims, DynamicState, accepts_data_dependent_sizes, install_shape_guards
from .number_tensors import StaticNumbersNeeded, has_numbers, numbers_for_backend
from .shape_env import DataDependent
from .global_state import (
    device_modes, device_modes_set_aside, functorch_transform_active, preserved_global_state,
    run_with_device_modes_set_aside,
)
from .interpreter import Frame
from .interpreter.frame import StopForBreak
from .reconstruct import ReturnCodegen, collect_tensor_outputs
from .resume import fresh_parameters
from .sources import ClosureSource, ConstTable, RootFunctionSource
from .tracer import Tracer
from .variables.autocast import (
    AUTOCAST_GRAPH_FUNCTIONS, close_open_blocks, enter_ambient_autocast, restore_autocast_on_error,
)
from .variables.contexts import set_grad_mode
from .variables.device_modes import check_open_blocks, install_ambient
from .variables.functions import UserFunctionVariable


@dataclass(frozen=True)
class BreakPoint:
    """Where the re-trace stops: the root instruction at ``offset``, started after ``count``
    traced instructions (the same visit of it, in a loop)."""

    offset: int
    count: int
    reason: BreakReason
    resume_caller: ResumeCaller
    # Whether a callee the break hands to CPython runs compiled (its own capture). Not
    # for an op left to CPython because a handler of the caller may catch its error:
    # captured alone, the callee would put the op back in a graph.
    compile_callee: bool = True
    # The split is at the next iteration of a loop the frame resumed inside, not a break.
    loop_split: bool = False


def _root_cells(tracer, fn) -> dict:
    code = fn.__code__
    return {name: tracer.cell_variable(cell, ClosureSource(RootFunctionSource(), i, name))
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
    def timed(fn, args, kwargs, options, *rest, **more):
        code = fn.__code__
        name = f"{fn.__qualname__} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
        with phase_timer.compile(name, progress=options.progress), phase_timer.phase("capture"):
            return capture(fn, args, kwargs, options, *rest, **more)
    return timed


@_timed_compile
def capture_call(fn, args: tuple, kwargs: dict, options, backend,
                 resume_caller: ResumeCaller | None = None, dynamic_state=None) -> CacheEntry:
    """Capture ``fn(*args, **kwargs)``; never raises unless fullgraph/raise_internal_errors ask.

    When the root frame meets something it cannot capture and ``resume_caller``
    is given (it compiles resume functions), the frame is traced again up to
    that instruction and split there (a graph break, ``breaks.py``); otherwise,
    or when the split is not possible, the frame runs eagerly.
    """
    start = time.perf_counter()
    entry = _capture_call(fn, args, kwargs, options, backend, resume_caller, dynamic_state, start,
                          split_loops=is_resume_code(fn.__code__))
    if entry is None:
        # The split at a resumed loop's next iteration was not possible: the trace unrolls
        # the rest of the loop instead, as for any loop.
        entry = _capture_call(fn, args, kwargs, options, backend, resume_caller, dynamic_state, start,
                              split_loops=False)
    return entry


def _capture_call(fn, args, kwargs, options, backend, resume_caller, dynamic_state, start, split_loops):
    """``capture_call``'s work; None when ``split_loops`` and the split at a resumed loop's
    next iteration fails (the caller captures again without it)."""
    capture = functools.partial(_capture, split_loops=split_loops)
    try:
        return capture(fn, args, kwargs, options, backend, start, dynamic_state)
    except _Failed as failed:
        failed.__traceback__ = None  # see _Failed
        error = failed.error
        point = getattr(error, "root_instruction", None)
        if fn.__code__ is DECORATE_CONTEXT_CODE and resume_caller is not None:
            return _context_decorated_entry(fn, resume_caller.callees, start)
        if point is None or resume_caller is None or _only_reads_a_local(fn.__code__, point[0]) \
                or getattr(error, "unsplittable", False):
            if getattr(error, "loop_back_edge", False):
                return None
            return _fallback(failed.tracer, fn, error, start)
        try:
            return capture(fn, args, kwargs, options, backend, start, dynamic_state,
                           stop=BreakPoint(point[0], point[1], _reason(error), resume_caller,
                                           not getattr(error, "eager_callee", False),
                                           getattr(error, "loop_back_edge", False)))
        except _Failed as again:
            again.__traceback__ = None
            if getattr(error, "loop_back_edge", False):
                logs.log("graph_breaks", f"{fn.__qualname__}: cannot split at the loop's next iteration "
                                         f"({again.error.reason}); the rest of the loop is unrolled")
                return None
            earlier = getattr(again.error, "retry_at", None)
            if earlier is not None and earlier[1] >= 0:  # split earlier, where the state can be handed over
                try:
                    return capture(fn, args, kwargs, options, backend, start, dynamic_state,
                                   stop=BreakPoint(earlier[0], earlier[1], _reason(error), resume_caller))
                except _Failed as third:
                    third.__traceback__ = None
                    again = third
            why = Unsupported(f"{error.reason} (and the frame cannot be split there: {again.error.reason})",
                              error.location)
            why.source_text = getattr(error, "source_text", "")
            return _fallback(again.tracer, fn, why, start)


_LOCAL_READS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_DEREF", "LOAD_CLOSURE"})


def _only_reads_a_local(code, offset: int) -> bool:
    """Whether the split would be before a read of a resume function's argument. Such a
    split makes no progress: the value (one capture could not wrap) reaches the next
    resume function as an argument again, whose capture fails the same way, split
    after split. The frame runs eagerly instead."""
    if not is_resume_code(code):
        return False
    arguments = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
    return any(ins.offset == offset and ins.opname in _LOCAL_READS and ins.argval in arguments
               for ins in dis.get_instructions(code))


class _Failed(Exception):
    """Capture of the frame failed with ``error``: the caller decides between a break and a fallback.

    Neither keeps a traceback: its frames (capture_call's among them) would form a cycle
    holding the call's arguments, and the user's tensors would outlive the call until
    the next garbage collection, where eager frees them at once."""

    def __init__(self, tracer, error: Unsupported):
        self.tracer = tracer
        self.error = error.with_traceback(None)


def _reason(error: Unsupported) -> BreakReason:
    reason = error.reason
    root_call = getattr(error, "root_call", None)
    if root_call is not None:  # the root frame breaks at the call; the callee runs compiled
        reason += f" ({root_call})"
    return BreakReason(reason, error.location, getattr(error, "source_text", "") or "")


def _capture(fn, args, kwargs, options, backend, start, dynamic_state=None,
             stop: BreakPoint | None = None, split_loops: bool = False) -> CacheEntry:
    if dynamic_state is None:  # one state for the retries below
        dynamic_state = DynamicState()
    while True:
        try:
            return _capture_once(fn, args, kwargs, options, backend, start, dynamic_state, stop, split_loops)
        except StaticNumbersNeeded:
            continue   # the numbers named are static now (DynamicState.static_numbers)
        except DataDependent as e:
            dynamic_state.data_dependent_break = e.why
            logs.log("dynamic", f"{fn.__qualname__}: reads of tensor data and data-dependent sizes break the graph: {e.why}")


def _capture_once(fn, args, kwargs, options, backend, start, dynamic_state, stop, split_loops) -> CacheEntry:
    tracer = Tracer(options)
    # A resume function's loop iterators stay unread: the loop splits at its next iteration.
    tracer.resumed_loops = split_loops and not options.fullgraph
    tracer.dynamic = DynamicDims(options, dynamic_state, backend)
    # weakly: the shape environment outlives the capture (its guards), the tracer must not
    traced_location = weakref.WeakMethod(tracer.user_location)
    tracer.dynamic.env.user_location = lambda: traced_location()() if traced_location() else ("", 0)
    tracer.fresh_parameters = fresh_parameters(fn.__code__)
    grad_before = torch.is_grad_enabled()
    tracer.guards.global_state(grad_before, torch.get_default_dtype())
    ambient_devices = device_modes()
    try:
        with preserved_global_state(fn.__qualname__), _restored_grad_mode(grad_before), \
                device_modes_set_aside(len(ambient_devices or ())):
            _refuse_unmodeled_modes(tracer, ambient_devices)
            enter_ambient_autocast(tracer)
            frame = Frame(tracer, fn.__code__, fn.__globals__, bind_root(tracer, fn, args, kwargs),
                          _root_cells(tracer, fn), name=fn.__qualname__)
            if stop is not None:
                frame.stop_count = stop.count
            if fn.__code__ is DECORATE_CONTEXT_CODE:
                result = _run_context_decorated(tracer, fn, frame)
            else:
                try:
                    result = frame.run()
                except StopForBreak as stopped:
                    if stopped.instruction.offset != stop.offset:
                        raise Unsupported("the second trace did not reach the same instruction") from None
                    # CPython continues in the grad mode outside the open `with` blocks
                    # (the break code re-enters them).
                    set_grad_mode(tracer, grad_mode_outside_blocks(frame, tracer.grad_enabled))
                    close_open_blocks(tracer)
                    check_open_blocks(tracer, open_device_blocks(frame))
                    return _finish_at_break(tracer, fn, frame, stop, backend, start)
            close_open_blocks(tracer)
            check_open_blocks(tracer, [])
            return _finish(tracer, fn, result, options, backend, start)
    except StaticNumbersNeeded:
        raise
    except DataDependent as e:
        if dynamic_state.data_dependent_break is not None:
            # Nothing data-dependent is left to break at: report it as any capture failure.
            error = Unsupported(f"a value that depends on tensor data: {e.why}")
            if options.fullgraph:
                raise error from None
            raise _Failed(tracer, error) from None
        where = tracer.current_frame
        if where is not None:
            e.why += f" (the decision at {where.code.co_filename}:{where.lineno()})"
        raise
    except Unsupported as e:
        if options.fullgraph:
            raise
        raise _Failed(tracer, e) from None
    except BackendCompilerFailed as e:
        if options.raise_internal_errors and e.__cause__ is not None:
            raise fallbacks.with_context(e.__cause__, "the backend's compile of the captured graph")
        if options.fullgraph:
            raise
        raise _Failed(tracer, Unsupported(str(e))) from None
    except Exception as e:
        where = tracer.current_frame
        location = f"{where.code.co_filename}:{where.lineno()}" if where is not None else None
        if options.raise_internal_errors:
            raise fallbacks.with_context(e, "capture", location)
        if options.fullgraph:
            raise InternalError(f"surge failed while capturing {fn.__qualname__}: "
                                f"{type(e).__name__}: {e}" + (f"\n  at {location}" if location else "")) from e
        raise _Failed(tracer, Unsupported(f"internal error: {type(e).__name__}: {e}", location)) from None


@contextlib.contextmanager
def _restored_grad_mode(mode: bool):
    """The trace switches grad mode as the code's ``with no_grad()`` blocks do."""
    try:
        yield
    finally:
        torch._C._set_grad_enabled(mode)


def _refuse_unmodeled_modes(tracer: Tracer, ambient_devices: tuple | None) -> None:
    """Inference mode, torch.func transforms and TorchFunctionModes other than torch's
    DeviceContext change what ops compute; capture does not model them. A frame called
    inside one runs eagerly, under a guard on it, so that later calls outside capture
    as usual. (The caller's autocast and default device are modelled: variables/autocast.py,
    variables/device_modes.py.)"""
    modes = {"inference mode": torch.is_inference_mode_enabled,
             "a torch.func transform": functorch_transform_active}
    for name, enabled in modes.items():
        if enabled():
            ref = tracer.consts.ref(enabled, enabled.__name__)
            tracer.guards.add(None, f"{ref}()", f"{name} is enabled")
            raise Unsupported(f"called with {name} enabled, which capture does not model")
    if ambient_devices is None:
        ref = tracer.consts.ref(device_modes, "device_modes")
        tracer.guards.add(None, f"{ref}() is None", "a TorchFunctionMode other than a DeviceContext is active")
        raise Unsupported("called with a TorchFunctionMode enabled, which capture does not model "
                          "(only torch's default-device mode is)")
    if ambient_devices:
        install_ambient(tracer, ambient_devices)


def _has_ops(gm_graph) -> bool:
    return any(n.op in ("call_function", "call_method", "call_module") and n.target is not torch._C._set_grad_enabled
               and n.target not in AUTOCAST_GRAPH_FUNCTIONS for n in gm_graph.nodes)


def _compile_graph(tracer: Tracer, fn, outputs: list, backend, skip_empty: bool):
    """Hand the graph (outputs: TensorVariables) to the backend; None when skipped as empty."""
    builder = tracer.graph
    builder.output([o.node for o in outputs])
    if skip_empty and not _has_ops(builder.graph):
        install_shape_guards(tracer)
        return None, None
    gm = builder.graph_module()
    example_inputs = [real for _, real in builder.inputs]
    wrap = None
    dynamic = tracer.dynamic
    dynamic.check_backend_takes_data_dependent_sizes()
    if (dynamic.numbers_as_tensors or dynamic.reads_as_tensors) and has_numbers(gm):
        # A backend without symbolic numbers, or without reads of tensor data, gets them
        # as 0-d tensors (number_tensors.py).
        gm, example_inputs, wrap = numbers_for_backend(
            dynamic, gm, example_inputs, only_reads=not dynamic.numbers_as_tensors,
            keep_reads=accepts_data_dependent_sizes(backend))
    if logs.enabled("graph"):
        logs.log("graph", f"captured graph of {fn.__qualname__}:\n{gm.print_readable(print_output=False)}")
    write_current(tracer.options, "source.py", source_of(fn))
    write_current(tracer.options, "graph.py", lambda: gm.print_readable(print_output=False))
    with phase_timer.phase("other"):  # the backend times its own phases; the rest is not capture
        compiled = call_backend(backend, gm, example_inputs)
    if wrap is not None:
        compiled = wrap(compiled)
    install_shape_guards(tracer)  # after the backend: tracing the graph may decide on sizes too
    if any(n.target in AUTOCAST_GRAPH_FUNCTIONS for n in gm.graph.nodes):
        compiled = restore_autocast_on_error(compiled)
    if tracer.device_modes.ambient_depth:
        compiled = run_with_device_modes_set_aside(compiled, tracer.device_modes.ambient_depth)
    counters["graphs"] += 1
    return gm, compiled


def _one_writer_per_entry(output_index: dict, side_effects):
    """The expression writer of an entry's return value (or break state) and of its side
    effects, one per generated entry: an object the trace made that both refer to (an
    instance stored into a closure cell and passed on) is built once, named, and shared."""
    writers: dict = {}

    def writer(codegen) -> BreakStateCodegen:
        if writers.get("codegen") is not codegen:
            writers.update(codegen=codegen, writer=BreakStateCodegen(codegen, output_index, side_effects))
        return writers["writer"]
    return writer


def _finish_at_break(tracer: Tracer, fn, frame: Frame, stop: BreakPoint, backend, start) -> CacheEntry:
    """The entry of a frame split at a graph break: graph, side effects, then the break code."""
    state = BreakState(frame, frame.instructions[frame.ip].offset,
                       stop.resume_caller.callees if stop.compile_callee else None)
    outputs: list = []
    seen: set = set()
    state.tensor_outputs(outputs, seen)
    for value in tracer.side_effects.values():
        collect_tensor_outputs(value, outputs, seen)
    output_index = {o.node: i for i, o in enumerate(outputs)}
    # Fail (and fall back) on a value that cannot be rebuilt before the backend sees the graph.
    BreakStateCodegen(EntryCodegen(ConstTable()), output_index, tracer.side_effects).state(state)
    runner = BreakRunner(fn.__code__, fn.__globals__, state, stop.resume_caller)
    writer = _one_writer_per_entry(output_index, tracer.side_effects)
    gm, compiled = _compile_graph(tracer, fn, outputs, backend, skip_empty=True)
    if stop.loop_split:
        counters["loop_splits"] += 1
        logs.log("graph_breaks", f"{fn.__qualname__} split at {stop.reason}")
    else:
        counters["graph_breaks"] += 1
        logs.log("graph_breaks", f"graph break in {fn.__qualname__}: {stop.reason}")
    runner_name = tracer.consts.ref(runner, "run_break")
    source, run = generate_entry(
        tracer.guards, tracer.consts, input_sources=[source for source, _ in tracer.graph.inputs],
        return_expr=lambda cg: writer(cg).state(state),
        effects=lambda cg: tracer.side_effects.statements(cg, writer(cg).expr) + writer(cg).late_statements(),
        compiled=compiled, counters=counters, hand_off=runner_name,
    )
    entry = CacheEntry(run, source, tracer.guards.render(), _lazy_diagnosis(tracer), graph=gm,
                       graph_break=None if stop.loop_split else stop.reason,
                       loop_split=stop.reason if stop.loop_split else None,
                       compile_seconds=time.perf_counter() - start, constants=tracer.consts)
    _log_entry(fn, entry)
    return entry


def _finish(tracer: Tracer, fn, result, options, backend, start) -> CacheEntry:
    outputs: list = []
    seen: set = set()
    # A return value may hold what only a paused frame holds too (a closure made in
    # the frame, an iterator): it is rebuilt as at a graph break.
    collect_state_outputs(result, outputs, seen)
    for value in tracer.side_effects.values():
        collect_tensor_outputs(value, outputs, seen)
    output_index = {o.node: i for i, o in enumerate(outputs)}
    # Fail (and fall back) on an unreturnable value before the backend sees the graph.
    BreakStateCodegen(EntryCodegen(ConstTable()), output_index, tracer.side_effects).expr(result)
    # A frame without tensor work (one that only rearranges its inputs, or does Python
    # arithmetic) hands no graph to the backend, as torch.compile does not: the entry
    # checks its guards and rebuilds the result.
    gm, compiled = _compile_graph(tracer, fn, outputs, backend, skip_empty=True)
    input_sources = [source for source, _ in tracer.graph.inputs]
    writer = _one_writer_per_entry(output_index, tracer.side_effects)
    source, run = generate_entry(
        tracer.guards, tracer.consts, input_sources=input_sources,
        return_expr=lambda cg: writer(cg).expr(result),
        effects=lambda cg: tracer.side_effects.statements(cg, writer(cg).expr),
        compiled=compiled, counters=counters,
    )
    entry = CacheEntry(run, source, tracer.guards.render(), _lazy_diagnosis(tracer),
                       graph=gm, compile_seconds=time.perf_counter() - start, constants=tracer.consts)
    if options.frontend_cache and disk_cache.stores_captures_of(fn.__code__):
        entry.disk_record = disk_cache.make_record(
            tracer, gm, input_sources=input_sources,
            return_expr=lambda cg: ReturnCodegen(cg, output_index).expr(result),
            effects=lambda cg: tracer.side_effects.statements(cg, ReturnCodegen(cg, output_index).expr))
    write_current(options, "guards.txt", entry.guards_text)
    _log_entry(fn, entry)
    return entry


def _context_decorated_entry(fn, callees, start) -> CacheEntry:
    """A ``@torch.no_grad()``-style wrapper whose function breaks: every call enters the
    context as torch's wrapper does and runs the wrapped function compiled inside it
    (split at its own breaks). It reads the wrapper's closure on each call: no guards."""
    def run(fn, args, kwargs):
        return callees.stand_in(fn)(*args, **kwargs)
    entry = CacheEntry(run, "(the wrapped function runs compiled inside the context)", "(none)",
                       lambda fn, args, kwargs: None, compile_seconds=time.perf_counter() - start)
    _log_entry(fn, entry)
    return entry


def _fallback(tracer: Tracer, fn, error: Unsupported, start) -> CacheEntry:
    install_shape_guards(tracer)
    reason = _reason(error)
    fallbacks.announce(reason.reason, location=reason.location)
    source, run = generate_entry(tracer.guards, tracer.consts, input_sources=[], return_expr=None,
                                 run_eagerly=True, counters=counters)
    entry = CacheEntry(run, source, tracer.guards.render(), _lazy_diagnosis(tracer),
                       fallback=reason, compile_seconds=time.perf_counter() - start, constants=tracer.consts)
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
