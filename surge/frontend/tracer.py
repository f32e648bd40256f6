"""The state of one capture: graph, guards, constants, grad mode, and the frames running.

Frames (``interpreter.frame.Frame``) execute bytecode; the tracer is what they
share: it wraps values read from the inputs (``wrap``), inlines calls of user
functions (``inline_call``) and knows the user's location for provenance.
"""
from __future__ import annotations

import collections
import contextlib
import inspect

import torch

from ..options import Options
from .code_kinds import DECORATE_CONTEXT_CODE
from .dynamic_dims import DynamicDims
from .global_state import programs_builtins
from .graph_builder import GraphBuilder
from .side_effects import SideEffects
from .guards import GuardSet
from .sources import AttrSource, ClosureSource, ConstSource, ConstTable, RootFunctionSource
from .variables.base import unsupported
from .variables.builder import wrap_value
from .variables.contexts import GeneratorContextVariable, GradModeContextVariable
from .variables.device_modes import DeviceModes
from .variables.hashing import process_order_reads
from .variables.iterators import ResumedLoopIterator
from .codegen_bytecode.analysis import STACK_PARAM_PREFIX
from .variables.functions import GeneratorVariable
from .variables.optimizers import USE_GRAD_CODE, trace_optimizer_step

# Objects whose identity the trace must keep: one variable per object, however reached
# (a list iterator a break hands to two locals advances once).
_MUTABLE_CONTAINERS = (list, dict, set, type(iter([])), type(reversed([])), collections.OrderedDict,
                       collections.defaultdict, collections.Counter)

# Inlined calls nested deeper than this are most likely unbounded recursion.
MAX_INLINE_DEPTH = 48
# torch.func transforms (grad, vmap, jacrev, ...) and their implementation.
FUNCTORCH_MODULES = ("torch._functorch", "torch.func")



def _one_yield():
    yield


# The function @contextlib.contextmanager returns (shared by every such context manager).
CONTEXTMANAGER_HELPER_CODE = contextlib.contextmanager(_one_yield).__code__


class Tracer:
    def __init__(self, options: Options):
        self.options = options
        self.consts = ConstTable()
        self.guards = GuardSet(self.consts)
        self.graph = GraphBuilder()
        # Which sizes are symbolic, and the shape environment (set per capture, capture.py).
        self.dynamic = DynamicDims(options, None, None)
        self.side_effects = SideEffects()
        self.grad_enabled = torch.is_grad_enabled()
        # Whether tensor subclasses' __torch_function__ overrides run (variables/torch_function.py):
        # as at the call, off inside DisableTorchFunctionSubclass blocks; guarded once consulted.
        self.torch_function_at_entry = torch._C._is_torch_function_enabled()
        self.torch_function_enabled = self.torch_function_at_entry
        self.torch_function_guarded = False
        # The open torch.autocast blocks (AutocastContextVariables), outermost first.
        self.autocast_blocks: list = []
        # torch's default-device modes as the trace models them (the caller's: capture.py).
        self.device_modes = DeviceModes()
        # The builtins the program sees (surge's own code runs with Python's: cache.py).
        self.builtins = programs_builtins()
        # Reads of an order this process's hashing decides, before the capture (hashing.py).
        self.order_reads_at_start = process_order_reads()
        self.current_frame = None
        # The exceptions being handled by running `except`/`finally` handlers, innermost
        # last (CPython's exc_info chain across the inlined frames).
        self.handled_exceptions: list = []
        self.instruction_count = 0
        # Writes the trace made to state outside the frame writing it (attributes, items,
        # globals, cells, container methods): a __hash__ that writes is not modelled (hashing.py).
        self.writes = 0
        # Root parameters that may hold objects made anew on every call (resume.py).
        self.fresh_parameters: frozenset = frozenset()
        # Whether a resume function's stack parameters holding iterators stay unread, so
        # that a loop it resumed inside splits at its next iteration (``ResumedLoopIterator``).
        self.resumed_loops = False
        # id -> ResumedLoopIterator of those parameters.
        self._loop_iterators: dict = {}
        self._wrapped: dict = {}
        # id -> (value, variable, source) of the mutable containers read from the inputs.
        self._containers: dict = {}
        # id -> (cell, CellVariable) of the closure cells read from functions.
        self._cells: dict = {}
        # source -> object of the inputs whose identity the trace used (note_identity).
        self._identities: dict = {}
        # The files of every code object a frame ran: what a capture kept on disk
        # depends on (frontend/disk_cache.py).
        self.code_files: set[str] = set()

    def note_code(self, code, f_globals: dict) -> None:
        """Remember the file a running frame's code comes from (``code_files``)."""
        path = code.co_filename
        if path == "<string>" and code.co_qualname.startswith("__create_fn__."):
            # A dataclass's generated method: its text follows the class, in the module's file.
            path = f_globals.get("__file__") or path
        self.code_files.add(path)

    def wrap(self, value, source, distinct_group=None):
        """``distinct_group``: containers of one group are known distinct (a guard of the
        caller's says so), so they get no pairwise ``is not`` guards among themselves."""
        if source is None:
            return wrap_value(self, value, None)
        found = self._wrapped.get(source)
        if found is not None and found[0] is value:
            return found[1]
        if hasattr(type(value), "__next__") and (self.resumed_loops or self._loop_iterators):
            loop = self._loop_iterator(value, source)
            if loop is not None:
                self._wrapped[source] = (value, loop)
                return loop
        if type(value) in _MUTABLE_CONTAINERS:
            var = self._wrap_container(value, source, distinct_group)
        else:
            var = wrap_value(self, value, source)
        self._wrapped[source] = (value, var)
        return var

    def _loop_iterator(self, value, source):
        """The ResumedLoopIterator for an iterator read from ``source``: a new one for a stack
        parameter of a resume function (not reached before), the existing one for the same
        object reached another way (guarded to be it), else None, with guards that the
        object is none of them (the trace would otherwise take one object for two)."""
        same = self._loop_iterators.get(id(value))
        if same is not None and same.value is value:
            self.guards.add(source, "{v} is {w}", f"{source.name()} is {same.source.name()}", other=same.source)
            return same
        for other in self._loop_iterators.values():
            self.guards.add(source, "{v} is not {w}", f"{source.name()} is not {other.source.name()}",
                            other=other.source)
        if not self.resumed_loops or source.parent is not None \
                or not getattr(source, "param", "").startswith(STACK_PARAM_PREFIX) \
                or any(seen is value for seen, _ in self._wrapped.values()) or id(value) in self._containers:
            return None
        loop = ResumedLoopIterator(self, value, source, lambda: self._wrap_read(value, source))
        self._loop_iterators[id(value)] = loop
        return loop

    def _wrap_read(self, value, source):
        """What reading ``value`` at ``source`` wraps it as, when a ResumedLoopIterator is read."""
        if type(value) in _MUTABLE_CONTAINERS:
            var = wrap_value(self, value, source)
            self._containers[id(value)] = (value, var, source, None)
            return var
        return wrap_value(self, value, source)

    def _wrap_container(self, value, source, distinct_group=None):
        """A list/dict/set (or list iterator) read from two places is one object: one variable, so a mutation
        through one name is seen through the other. Which places alias is guarded."""
        same = self._containers.get(id(value))
        if same is not None and same[0] is value:
            self.guards.add(source, "{v} is {w}", f"{source.name()} is {same[2].name()}", other=same[2])
            return same[1]
        for _, _, other, group in self._containers.values():
            if distinct_group is None or group != distinct_group:
                self.guards.add(source, "{v} is not {w}", f"{source.name()} is not {other.name()}", other=other)
        var = wrap_value(self, value, source)
        self._containers[id(value)] = (value, var, source, distinct_group)
        return var

    def cell_variable(self, cell, source):
        """The variable of a real closure cell: one per cell, so a write through one
        function's closure is seen through another's (the aliasing is guarded)."""
        from .variables.functions import CellVariable

        found = self._cells.get(id(cell))
        if found is not None and found[0] is cell:
            other = found[1].source
            if source is not None and other is not None and source != other:
                self.guards.add(source.parent, f"{{v}}.__closure__[{source.index}] is {{w}}.__closure__[{other.index}]",
                                f"{source.name()} is the cell of {other.name()}", other=other.parent)
            return found[1]
        var = CellVariable(lazy=(cell, source))
        self._cells[id(cell)] = (cell, var)
        return var

    def note_identity(self, var, obj) -> None:
        """An input object (``var``, read from its source) that the trace keys by identity (a
        dict key, a set element) or compares with ``is``: which of those are one object is
        guarded, since the trace's answers depend on it (a lookup of another object misses)."""
        source = var.source
        if source is None or source in self._identities:
            return
        for other_source, other in self._identities.items():
            self.guards.same_object(source, other_source, obj is other)
        self._identities[source] = obj

    def stack_trace(self) -> str:
        return self.current_frame.stack_trace() if self.current_frame is not None else ""

    def user_location(self) -> tuple:
        """(file, line) of the instruction being traced, in the innermost frame."""
        frame = self.current_frame
        return (frame.code.co_filename, frame.lineno()) if frame is not None else ("", 0)

    def depth(self) -> int:
        depth, frame = 0, self.current_frame
        while frame is not None:
            depth += 1
            frame = frame.parent
        return depth

    def inline_call(self, fn, args: list, kwargs: dict):
        from .interpreter.frame import Frame
        from .variables.functions import bind_arguments

        code = fn.code
        if code is DECORATE_CONTEXT_CODE:
            return self.call_context_decorated(fn, args, kwargs)
        if code is USE_GRAD_CODE:  # an optimizer's step: its grad mode, without torch's breaks
            return trace_optimizer_step(self, fn, args, kwargs)
        if code is CONTEXTMANAGER_HELPER_CODE:
            # @contextlib.contextmanager: the wrapped generator drives enter and exit.
            cells = dict(zip(code.co_freevars, fn.closure_cells(self)))
            generator = cells["func"].load(self).call(self, args, kwargs)
            return GeneratorContextVariable(generator, made_at=self.current_frame.root_split_point())
        if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE):
            unsupported(f"calling async function {code.co_name}")
        if str(fn.f_globals.get("__name__", "")).startswith(FUNCTORCH_MODULES):
            # Its transforms push interpreter levels in torch for real: the call runs in CPython.
            unsupported(f"functorch transform {code.co_qualname} (torch.func) in compiled code")
        if self.depth() >= MAX_INLINE_DEPTH:
            unsupported(f"calls nested deeper than {MAX_INLINE_DEPTH} (recursion?)")
        bound = bind_arguments(self, fn, args, kwargs)
        cells = dict(zip(code.co_freevars, fn.closure_cells(self)))
        is_generator = bool(code.co_flags & inspect.CO_GENERATOR)
        frame = Frame(self, code, fn.f_globals, bound, cells, parent=self.current_frame,
                      name=getattr(fn, "qualname", code.co_name), is_generator=is_generator)
        if is_generator:
            return GeneratorVariable(self, frame, *_function_names(fn))
        result = frame.run()
        return result

    def call_context_decorated(self, fn, args, kwargs):
        """A function wrapped by @torch.no_grad() / @torch.enable_grad() / @set_grad_enabled(m)."""
        from .variables.functions import UserFunctionVariable

        if not isinstance(fn, UserFunctionVariable):
            unsupported("a context-decorated function created inside compiled code")
        names = fn.code.co_freevars
        cells = dict(zip(names, fn.fn.__closure__))
        factory = cells["ctx_factory"].cell_contents
        owner = getattr(factory, "__self__", None)
        if type(owner) is torch.no_grad:
            ctx = GradModeContextVariable(False)
        elif type(owner) is torch.enable_grad:
            ctx = GradModeContextVariable(True)
        elif type(owner) is torch.set_grad_enabled:
            ctx = GradModeContextVariable(bool(owner.mode))
        else:
            unsupported(f"function decorated with context manager {factory}")
        parent = fn.source if isinstance(fn.source, RootFunctionSource) else (
            ConstSource(fn.fn, f"fn<{fn.fn.__qualname__}>") if fn.source is not None else None)
        if isinstance(parent, RootFunctionSource):
            # Every decorated function shares this wrapper's code object: guard which
            # context and which function this one wraps.
            owner_source = AttrSource(ClosureSource(parent, names.index("ctx_factory"), "ctx_factory"), "__self__")
            self.guards.type_is(owner_source, type(owner))
            if type(owner) is torch.set_grad_enabled:
                self.guards.constant(AttrSource(owner_source, "mode"), owner.mode)
        index = names.index("func")
        inner = self.wrap(cells["func"].cell_contents, ClosureSource(parent, index, "func") if parent else None)
        ctx.enter(self)
        result = inner.call(self, args, kwargs)
        ctx.exit(self)
        return result


def _function_names(fn) -> tuple:
    """``fn.__name__`` and ``fn.__qualname__`` as the call sees them (a generator takes both)."""
    real = getattr(fn, "fn", None)
    if real is not None:  # a real function
        return real.__name__, real.__qualname__
    name = getattr(fn, "attrs", {}).get("__name__")
    return (name.as_constant() if name is not None else None), getattr(fn, "qualname", None)
