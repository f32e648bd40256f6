"""Graph breaks of the root frame: compile the prefix, let CPython run the break, resume.

When capture of a root frame (a compiled function, or a resume function) meets
something it cannot put in a graph, ``capture.py`` traces the frame again and
stops right before the root-frame instruction that failed: the instruction
itself (``print(...)``, ``x.item()``, a branch on a tensor), or, when the
failure happened inside an inlined call, the CALL of that function, which
CPython then makes through the callee's compiled stand-in (``compiled_callees.py``:
the callee is captured on its own and split at its own break). A second trace (rather than rolling the first one
back) guarantees that nothing the failed instruction began to record — graph
nodes, side effects, guards — leaks into the prefix.

At the stop, this module builds the cache entry: a graph computing every
tensor that the frame's value stack, live locals and replayed side effects
need; a ``FrameLayout`` of that state; the break code that runs the
instruction in CPython (``break_code.py``) and hands off to resume functions
(``resume.py``). The entry runs the graph, replays the side effects, rebuilds
the stack and locals as Python values and calls the break code. Resume
functions are compiled through ``ResumeCaller`` when they are called, so they
are captured, guarded and cached like any compiled function.
"""
from __future__ import annotations

import inspect
import itertools
import types

import torch

from ..errors import Unsupported
from .break_code import break_code
from .compiled_callees import CompiledCallees
from .codegen_bytecode.analysis import call_start, live_locals
from .codegen_bytecode.assembler import BytecodeError
from .codegen_bytecode.layout import FrameLayout, Slot
from .interpreter.frame import LazyInput
from .reconstruct import ReturnCodegen, collect_tensor_outputs
from .resume import mark_fresh_locals
from .sources import ClosureSource, RootFunctionSource
from .tail_calls import TailCall
from .variables.base import NULL
from .variables.containers import DictVariable, IteratorVariable, ListVariable, SetVariable, TupleVariable
from .variables.autocast import AutocastContextVariable, autocast_expression
from .variables.contexts import (
    BoundContextMethod, GeneratorContextVariable, GradModeContextVariable, ProfilerContextVariable,
)
from .variables.functions import (
    CellVariable, ContainerMethodVariable, GeneratorVariable, NestedFunctionVariable, OpaqueCallableVariable,
    OpaqueMethodVariable, TensorMethodVariable, UserFunctionVariable, UserMethodVariable,
)
from .variables.device_modes import DeviceBlockVariable
from .variables.exceptions import rebuild_exception, with_chain
from .variables.exit_stacks import ExitStackVariable
from .variables.hashing import HashedKey
from .variables.iterators import ChainIterator, KeyedIterator, ResumedLoopIterator, ReversedIterator, SequenceIterator
from .variables.objects import ExceptionVariable, NewObjectVariable


class BreakState:
    """The root frame's state at the break: stack values, live locals and cell contents."""

    def __init__(self, frame, offset: int, callees=None):
        code = frame.code
        self.code = code
        self.offset = offset
        start = call_start(code, offset)
        slots, values = [], []
        callee = _callee_depth(frame.instructions[frame.ip]) if callees is not None else None
        stack = list(frame.stack)
        if callee is not None and len(stack) > callee:
            # CPython calls the callee's compiled stand-in: a break inside it splits it there.
            # ([NULL, callable, args...], or [callable, self, args...] as a comprehension's call.)
            if stack[-callee - 1] is not NULL:
                callee += 1
            stack[-callee] = CalleeStandIn(stack[-callee], callees)
        for var in stack:
            if var is NULL:
                slots.append(Slot.NULL)
            elif isinstance(var, BoundContextMethod) and var.which == "exit":
                slots.append(Slot.WITH)
                values.append(var.ctx)  # re-entered by the break code
            else:
                slots.append(Slot.VALUE)
                values.append(var)
        # A live local still unbound is left out: it stays an unbound local of the
        # generated code, so reading it there raises UnboundLocalError as in eager.
        names = tuple(name for name in live_locals(code, start) if frame.locals.get(name) is not None)
        values += [frame.locals[name] for name in names]
        self.layout = FrameLayout(tuple(slots), names)
        # Locals holding an object the trace built: the break code builds it on each call.
        self.fresh_locals = tuple(n for n in names if isinstance(frame.locals[n], NewObjectVariable))
        # Cell variables of the root code get new cells holding their current contents
        # (made once: closures rebuilt for the break share them).
        self.cellvars = code.co_cellvars
        for name in self.cellvars:
            values.append(frame.cells.get(name) or CellVariable())
        self.values = values
        self.parameter_count = len(values) - len(self.cellvars)

    def tensor_outputs(self, outputs: list, seen: set) -> None:
        for value in self.values:
            collect_state_outputs(value, outputs, seen)


def _callee_depth(instruction) -> int | None:
    """How deep below the top of the stack a call instruction finds its callable."""
    if instruction.opname == "CALL":
        return instruction.arg + 1
    if instruction.opname == "CALL_FUNCTION_EX":
        return 2 + (instruction.arg & 1)
    return None


class CalleeStandIn:
    """The callable of the CALL at a break, passed to CPython as its compiled stand-in."""

    def __init__(self, callee, callees):
        self.callee = callee
        self.callees = callees


def collect_state_outputs(value, outputs, seen) -> None:
    """The graph-computed tensors a value needs, also inside closures, cells, iterators and
    paused generators (what a break hands over, or a function returns)."""
    if ("visited", id(value)) in seen:  # cells and closures may refer to each other
        return
    if isinstance(value, ResumedLoopIterator):
        if value.unread():  # handed over as the object itself
            return
        value = value.inner
    if isinstance(value, CalleeStandIn):
        collect_state_outputs(value.callee, outputs, seen)
    elif isinstance(value, CellVariable):
        seen.add(("visited", id(value)))
        collect_state_outputs(value.contents(), outputs, seen)
    elif isinstance(value, GeneratorVariable):
        seen.add(("visited", id(value)))
        for item in list(value.frame.locals.values()) + list(value.frame.cells.values()):
            collect_state_outputs(item, outputs, seen)
    elif isinstance(value, ChainIterator):
        for part in ([value.current] if value.current is not None else []) + value.pending:
            collect_state_outputs(part, outputs, seen)
    elif _iterated_container(value) is not None:
        collect_state_outputs(_iterated_container(value), outputs, seen)  # rebuilt whole (BreakStateCodegen)
    elif isinstance(value, IteratorVariable):
        for item in value.remaining():
            collect_state_outputs(item, outputs, seen)
    elif isinstance(value, TensorMethodVariable):
        collect_state_outputs(value.tensor, outputs, seen)
    elif isinstance(value, (OpaqueMethodVariable, UserMethodVariable)):
        collect_state_outputs(value.self_var, outputs, seen)
    elif isinstance(value, NestedFunctionVariable):
        seen.add(("visited", id(value)))
        for item in [*value.defaults, *value.kwdefaults.values(), *value.cells]:
            collect_state_outputs(item, outputs, seen)
    elif value is not None and not isinstance(value, LazyInput):
        collect_tensor_outputs(value, outputs, seen, each=collect_state_outputs)


def grad_mode_outside_blocks(frame, current: bool) -> bool:
    """The grad mode the break code starts in: the mode before the outermost open grad-mode
    `with` block (re-entering the blocks switches it again), else the current mode."""
    for var in frame.stack:
        if isinstance(var, BoundContextMethod) and isinstance(var.ctx, GradModeContextVariable):
            return var.ctx.prior_mode
    return current


def open_device_blocks(frame) -> list:
    """The devices of the ``with torch.device(...)`` blocks open at the break, outermost
    first (the break code enters them again)."""
    return [var.ctx.device for var in frame.stack
            if isinstance(var, BoundContextMethod) and isinstance(var.ctx, DeviceBlockVariable)]


class BreakStateCodegen(ReturnCodegen):
    """Expressions for the values at a break; adds what only a paused frame holds.

    A mutable object made by the trace (list, dict, set, user object) is built
    once and named (``(m0 := [...])``): CPython may mutate it after the break,
    so every place that refers to it must get the same object.
    """

    def __init__(self, codegen, output_index: dict, side_effects=None):
        super().__init__(codegen, output_index)
        self.side_effects = side_effects  # which input containers the entry replays writes into
        self._built: dict[int, str] = {}
        self._building: set[int] = set()
        self._cells: dict[int, str | None] = {}
        # (index in the state, expression) of values made after the side effects replay.
        self._late: list[tuple[int, str]] = []
        self._late_names: dict[int, str] = {}
        self._top_level = False

    def const(self, value, hint="K"):
        # A string, bytes or number written as a literal would be one object with every
        # equal literal of the break code (the compiler merges them): handed over as the
        # very object the trace holds, `is` and id() answer as they did before the break.
        if type(value) in (str, bytes, float) or (type(value) is int and not -5 <= value <= 256):
            return self.codegen.consts.ref(value, type(value).__name__)
        return super().const(value, hint)

    def expr(self, value) -> str:
        if isinstance(value, ResumedLoopIterator):
            if value.unread():  # the call's own iterator, handed over as it is
                return self.codegen.value_of(value.source)
            value = value.inner
        top_level, self._top_level = self._top_level, False
        over = _iterated_container(value)
        if over is not None and self.side_effects is not None and self.side_effects.replays(over):
            # An iterator over an input's container that the entry writes into is made after
            # the side effects replay (CPython's iterator checks the size the container had
            # when it was made): in the state itself, where the entry puts it in afterwards.
            name = self._late_names.get(id(value))
            if not top_level:
                raise Unsupported("graph break with an iterator over a changed input container inside another value")
            if name is not None:
                return _LATE + name
            name = self._late_names[id(value)] = self._built[id(value)] = f"m{len(self._built)}"
            return f"{_LATE}({name} := {self._iterator_over(value, over)})"
        if _has_identity(value) and value.source is None:
            name = self._built.get(id(value))
            if name is None:
                name = self._built[id(value)] = f"m{len(self._built)}"
                self._building.add(id(value))
                made = self._expr(value)
                self._building.discard(id(value))
                return f"({name} := {made})"
            if id(value) in self._building:  # one expression cannot hold itself (a generator in its own closure)
                raise Unsupported("graph break with a value that refers to itself")
            return name
        return self._expr(value)

    def _expr(self, value) -> str:
        if isinstance(value, CalleeStandIn):
            stand_in = self.codegen.consts.ref(value.callees.stand_in, "compiled_stand_in")
            return f"{stand_in}({self.expr(value.callee)})"
        if isinstance(value, LazyInput):  # an argument the trace never read: passed on as is
            return self.codegen.value_of(value.source)
        if isinstance(value, CellVariable):
            return self.cell(value)
        if isinstance(value, GeneratorVariable):
            return self.fresh_generator(value)
        over = _iterated_container(value)
        if over is not None:
            return self._iterator_over(value, over)
        if isinstance(value, (SequenceIterator, ReversedIterator)) and value.seq is None:  # exhausted
            make = "reversed" if isinstance(value, ReversedIterator) else "iter"
            over_tuple = value.kind in (type(iter(())), type(reversed(())))
            return f"{make}(())" if over_tuple else f"{make}([])"
        if isinstance(value, ChainIterator):  # a chain again, over what it had still to walk
            parts = ([value.current] if value.current is not None else []) + value.pending
            return f"{self.codegen.consts.ref(itertools.chain, 'chain')}({', '.join(self.expr(p) for p in parts)})"
        if isinstance(value, IteratorVariable):
            # Any other iterator: a list iterator over the items still to come.
            return "iter([" + ", ".join(self.expr(i) for i in value.remaining()) + "])"
        if isinstance(value, TensorMethodVariable):  # a loaded method whose call breaks
            return f"{self.expr(value.tensor)}.{value.name}"
        if isinstance(value, OpaqueMethodVariable):
            return f"{self.expr(value.self_var)}.{value.name}"
        if isinstance(value, ContainerMethodVariable):  # `lst.append` loaded for a call whose arguments break
            return f"{self.expr(value.container)}.{value.name}"
        if isinstance(value, UserMethodVariable) and value.source is None \
                and isinstance(value.fn, UserFunctionVariable):  # `obj.method` loaded for a call
            method = self.codegen.consts.ref(types.MethodType, "MethodType")
            fn = self.codegen.consts.ref(value.fn.fn, value.fn.fn.__name__)
            return f"{method}({fn}, {self.expr(value.self_var)})"
        if isinstance(value, OpaqueCallableVariable):
            return self.codegen.consts.ref(value.fn, getattr(value.fn, "__name__", "fn"))
        if isinstance(value, NestedFunctionVariable):
            # A function made in the trace (a lambda, a closure, a 3.11 comprehension):
            # made again over the same cells.
            defaults = "(" + "".join(self.expr(d) + ", " for d in value.defaults) + ")"
            kwdefaults = "{" + ", ".join(f"{k!r}: {self.expr(v)}" for k, v in value.kwdefaults.items()) + "}"
            function = self._function(value.code, value.f_globals, value.qualname, defaults, kwdefaults, value.cells)
            attrs = value.metadata()
            if not attrs:
                return function
            metadata = "{" + ", ".join(f"{k!r}: {self.expr(v)}" for k, v in attrs.items()) + "}"
            return f"{self.codegen.consts.ref(with_metadata, 'with_metadata')}({function}, {metadata})"
        if isinstance(value, ExceptionVariable):  # raised or caught in the trace, re-raised by CPython
            cls = self.codegen.consts.ref(value.exc_type, value.exc_type.__name__)
            made = f"{cls}(" + "".join(self.expr(a) + ", " for a in value.args) + ")"
            if not value.is_plain():  # a Python __init__ ran, keywords or attributes: not run again
                made = (f"{self.codegen.consts.ref(rebuild_exception, 'rebuild_exception')}({cls}, "
                        f"{self.tuple_expr(value.args)}, {self.tuple_expr(value.init_args)}, "
                        "{" + "".join(f"{k!r}: {self.expr(v)}, " for k, v in value.init_kwargs.items()) + "}, "
                        "{" + "".join(f"{k!r}: {self.expr(v)}, " for k, v in value.attrs.items()) + "})")
            if not value.has_chain():
                return made
            chain = self.codegen.consts.ref(with_chain, "with_chain")
            return (f"{chain}({made}, {self.expr(value.cause)}, {self.expr(value.context)}, "
                    f"{value.suppress_context})")
        if isinstance(value, (GeneratorContextVariable, ExitStackVariable)):
            # Its generator is paused inside the trace (or, for an ExitStack, the contexts it
            # entered): split where the context manager is made instead, so that CPython
            # makes the real one.
            what = "an ExitStack" if isinstance(value, ExitStackVariable) else "a @contextmanager"
            error = Unsupported(f"graph break inside {what} block")
            error.retry_at = value.made_at
            raise error
        if isinstance(value, GradModeContextVariable):
            cls = torch.enable_grad if value.target_mode else torch.no_grad
            return f"{self.codegen.consts.ref(cls, cls.__name__)}()"
        if isinstance(value, ProfilerContextVariable):
            arguments = [self.expr(a) for a in value.args] + [f"{k}={self.expr(v)}" for k, v in value.kwargs.items()]
            return f"{self.codegen.consts.ref(value.cls, value.cls.__name__)}({', '.join(arguments)})"
        if isinstance(value, AutocastContextVariable):
            return autocast_expression(self.codegen.consts, value)
        if isinstance(value, DeviceBlockVariable):  # the device is its own context manager
            return self.const(value.device)
        return super().expr(value)

    def _iterator_over(self, value, over) -> str:
        """An iterator over the list, tuple or dict itself (rebuilt once, as every other
        reference to it), advanced past what the trace took: it sees later changes to it."""
        if isinstance(value, (SequenceIterator, ReversedIterator)):
            at = self.codegen.consts.ref(at_position, "at_position")
            make = "reversed" if isinstance(value, ReversedIterator) else "iter"
            return f"{at}({make}({self.expr(over)}), {value.index})"
        advance = self.codegen.consts.ref(advanced, "advanced")
        walked = "" if value.part == "set" else f".{value.part}()"
        return f"{advance}(iter({self.expr(over)}{walked}), {value.consumed()})"

    def tuple_expr(self, values) -> str:
        return "(" + "".join(self.expr(v) + ", " for v in values) + ")"

    def _function(self, code, f_globals, qualname, defaults: str, kwdefaults: str, cells: list) -> str:
        maker = self.codegen.consts.ref(make_closure, "make_closure")
        cells_text = "(" + "".join(self.cell(c) + ", " for c in cells) + ")"
        return (f"{maker}({self.codegen.consts.ref(code, 'code')}, {self.codegen.consts.ref(f_globals, 'f_globals')}, "
                f"{qualname!r}, {defaults}, {kwdefaults}, {cells_text})")

    def cell(self, cell: CellVariable) -> str:
        """The cell object behind a closure variable: the function's own cell for one read
        from the inputs, else a new cell made once, so every closure rebuilt over it and
        the break code share it."""
        if cell.real_cell is not None:
            source = cell.source
            if isinstance(source, ClosureSource) and isinstance(source.parent, RootFunctionSource):
                return f"fn.__closure__[{source.index}]"
            return self.codegen.consts.ref(cell.real_cell, "cell")
        name = self._cells.get(id(cell), "")
        if name is None:
            raise Unsupported("graph break with a closure cell that holds itself")
        if name:
            return name
        self._cells[id(cell)] = None  # being built
        name = f"c{len(self._cells)}"  # numbered now: the cells its contents hold number after it
        maker = self.codegen.consts.ref(types.CellType, "CellType")
        contents = cell.contents()
        made = f"{maker}()" if contents is None else f"{maker}({self.expr(contents)})"
        self._cells[id(cell)] = name
        return f"({name} := {made})"

    def fresh_generator(self, generator: GeneratorVariable) -> str:
        """A generator the trace made but has not started, made again in CPython (which
        runs its body); a generator the trace already advanced cannot be handed over."""
        frame = generator.frame
        code = frame.code
        if frame.ip != 0 or frame.done or frame.paused or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
            raise Unsupported("graph break while a generator is being iterated (not supported yet)")
        function = self._function(code, frame.f_globals, code.co_qualname, "()", "{}",
                                  [frame.cells[n] for n in code.co_freevars])
        positional = code.co_varnames[:code.co_argcount]
        keywords = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
        args = [self.expr(frame.locals[n]) for n in positional]
        args += [f"{n}={self.expr(frame.locals[n])}" for n in keywords]
        made = f"{function}({', '.join(args)})"
        if generator.names == {"__name__": code.co_name, "__qualname__": code.co_qualname}:
            return made
        return f"{self.codegen.consts.ref(with_metadata, 'with_metadata')}({made}, {generator.names!r})"

    def state(self, state: BreakState) -> str:
        parts = []
        for i, value in enumerate(state.values):
            self._top_level = True
            parts.append(self.expr(value))
            self._top_level = False
            if parts[-1].startswith(_LATE):
                self._late.append((i, parts[-1][len(_LATE):]))
                parts[-1] = "None"
        return "(" + "".join(p + ", " for p in parts) + ")"

    def late_statements(self) -> list[str]:
        """After the side effects: the state's iterators over containers of the inputs, made
        over the containers as the replay left them (CPython's iterator checks their size)."""
        return [f"result = result[:{i}] + ({made},) + result[{i + 1}:]" for i, made in self._late]


# Values with identity or state of their own: every place at the break that holds one
# gets the same rebuilt object (an iterator shared by two locals advances once).
# (Not exceptions: a name holding one in the break code would make a cycle through its
# traceback, keeping the call's tensors alive.)
_MUTABLE_VARIABLES = (ListVariable, DictVariable, SetVariable, NewObjectVariable, IteratorVariable, NestedFunctionVariable)


def _has_identity(value) -> bool:
    """Also an instance of a namedtuple's subclass: it may hold attributes of its own."""
    return isinstance(value, _MUTABLE_VARIABLES) or (
        isinstance(value, TupleVariable) and value.cls is not None and value.cls.__dictoffset__ != 0)


_LATE = "<late>"  # marks an expression state() moves after the side effects


def _iterated_container(value):
    """The list, tuple or dict an iterator of the trace walks (made again over it at a
    break), or None."""
    if isinstance(value, (SequenceIterator, ReversedIterator)):
        return value.seq
    if isinstance(value, KeyedIterator) and value.part != "set" and value.container.owner is None:
        return value.container
    if isinstance(value, KeyedIterator) and value.part == "set" and _rebuilt_in_order(value.container):
        return value.container
    return None


def _rebuilt_in_order(s: SetVariable) -> bool:
    """Whether CPython's set, made again at the break (an input's is the very set), walks its
    elements in the order the trace's did: then an iterator over it, advanced, goes on where
    the trace's stopped."""
    if s.source is not None:
        return True
    keys = list(s.items.table)
    return all(not hasattr(k, "variable") or isinstance(k, HashedKey) for k in keys) and \
        all(a is b for a, b in zip(set(keys), keys))


def at_position(iterator, index: int):
    """A list or tuple iterator (or ``reversed``) at ``index``, where the trace's had got to."""
    iterator.__setstate__(index)
    return iterator


def advanced(iterator, count: int):
    """``iterator`` after ``count`` items (an iterator the trace had advanced, made again)."""
    for _ in range(count):
        next(iterator)
    return iterator


def make_closure(code, f_globals, qualname, defaults, kwdefaults, cells):
    """A function like MAKE_FUNCTION makes: code, globals, defaults, closure cells."""
    fn = types.FunctionType(code, f_globals, code.co_name, defaults or None, cells or None)
    fn.__qualname__ = qualname
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    return fn


def with_metadata(fn, metadata: dict):
    """``fn`` with the ``__name__`` / ``__doc__`` / ... the trace set on it."""
    for name, value in metadata.items():
        setattr(fn, name, value)
    return fn


class BreakRunner:
    """Called by the entry with the rebuilt state: makes the break function and runs it."""

    def __init__(self, code, f_globals: dict, state: BreakState, call_resume):
        try:
            self.break_code = break_code(code, state.offset, state.layout, call_resume=call_resume)
        except BytecodeError as e:
            raise Unsupported(f"cannot resume after this graph break: {e}") from e
        for exit in self.break_code.exits:
            mark_fresh_locals(exit.resume, state.fresh_locals)
        self.f_globals = f_globals
        self.cellvars = state.cellvars
        self.parameter_count = state.parameter_count
        # Without cells the break function is the same object on every call.
        self.function = None
        if not code.co_cellvars and not code.co_freevars:
            self.function = self.break_code.make_function(f_globals, {})

    def __call__(self, fn, box: list):
        """``box`` holds the state tuple; it is taken out, never kept in a local (an
        exception on the stack would hold this frame, and so itself, through its traceback)."""
        if self.function is not None:
            return self.function(*box.pop())
        state = box.pop()
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        cells.update(zip(self.cellvars, state[self.parameter_count:]))
        box.append(state[:self.parameter_count])
        del state
        return self.break_code.make_function(self.f_globals, cells)(*box.pop())


class ResumeCaller:
    """``call_resume(resume_fn, *args)`` of break code: run a resume function compiled.

    ``cache_of(code)`` gives the resume code's ``CodeCache`` (shared with other
    compiles of the same backend, or private to one ``explain`` run). The same
    caches serve the callees that a break at a call runs compiled (``callees``).
    """

    def __init__(self, cache_of, options, backend, records=None):
        self.callees = CompiledCallees(cache_of, options, backend, records)

    def __call__(self, resume_fn, *args):
        # Break code returns what this returns, at once: the call is made by the caller of
        # the entry, so that a chain of resume functions does not nest (tail_calls.py).
        return TailCall(self.callees.run_entry, resume_fn, args)
