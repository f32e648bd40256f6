"""Graph breaks of the root frame: compile the prefix, let CPython run the break, resume.

When capture of a root frame (a compiled function, or a resume function) meets
something it cannot put in a graph, ``capture.py`` traces the frame again and
stops right before the root-frame instruction that failed: the instruction
itself (``print(...)``, ``x.item()``, a branch on a tensor), or, when the
failure happened inside an inlined call, the CALL of that function, which then
runs as a whole in CPython. A second trace (rather than rolling the first one
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

import dis
import types

import torch

from ..errors import Unsupported
from .break_code import break_code
from .codegen import MISS
from .codegen_bytecode.analysis import call_start, live_locals
from .codegen_bytecode.assembler import BytecodeError
from .codegen_bytecode.layout import FrameLayout, Slot
from .interpreter.frame import LazyInput
from .reconstruct import ReturnCodegen, collect_tensor_outputs
from .variables.base import NULL
from .variables.containers import DictVariable, IteratorVariable, ListVariable, SetVariable
from .variables.contexts import GradModeContextVariable, BoundContextMethod
from .variables.functions import (
    GeneratorVariable, NestedFunctionVariable, OpaqueCallableVariable, OpaqueMethodVariable, TensorMethodVariable,
    UserFunctionVariable, UserMethodVariable,
)
from .variables.objects import NewObjectVariable


class _Unbound:
    """Stands for a cell variable that has no value yet at the break."""

    def __repr__(self):
        return "UNBOUND"


UNBOUND = _Unbound()


class BreakState:
    """The root frame's state at the break: stack values, live locals and cell contents."""

    def __init__(self, frame, offset: int):
        code = frame.code
        self.code = code
        self.offset = offset
        start = call_start(code, offset)
        if in_inlined_comprehension(code, offset):
            raise Unsupported("graph break inside a comprehension inlined into its function (not supported yet)")
        slots, values = [], []
        for var in frame.stack:
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
        # Cell variables of the root code get new cells holding their current contents.
        self.cellvars = code.co_cellvars
        for name in self.cellvars:
            cell = frame.cells.get(name)
            values.append(cell.contents() if cell is not None else None)
        self.values = values
        self.parameter_count = len(values) - len(self.cellvars)

    def tensor_outputs(self, outputs: list, seen: set) -> None:
        for value in self.values:
            _collect(value, outputs, seen)


# What the handler of a comprehension inlined by Python 3.12 does: drop the list,
# restore the saved loop variable, re-raise.
_COMPREHENSION_HANDLER = ("SWAP", "POP_TOP", "SWAP", "STORE_FAST", "RERAISE")


def in_inlined_comprehension(code, offset: int) -> bool:
    """Whether ``offset`` is in the body of a comprehension inlined into ``code`` (3.12):
    its stack holds the saved loop variable, which generated code cannot rebuild yet."""
    instructions = list(dis.get_instructions(code))
    index = {ins.offset: n for n, ins in enumerate(instructions)}
    for entry in dis.Bytecode(code).exception_entries:
        if not entry.start <= offset < entry.end:
            continue
        first = index[entry.target]
        names = tuple(ins.opname for ins in instructions[first:first + len(_COMPREHENSION_HANDLER)])
        if names == _COMPREHENSION_HANDLER:
            return True
    return False


def _collect(value, outputs, seen) -> None:
    if isinstance(value, IteratorVariable) and not isinstance(value, GeneratorVariable):
        for item in value.items[value.position:]:
            _collect(item, outputs, seen)
    elif isinstance(value, TensorMethodVariable):
        _collect(value.tensor, outputs, seen)
    elif isinstance(value, (OpaqueMethodVariable, UserMethodVariable)):
        _collect(value.self_var, outputs, seen)
    elif isinstance(value, NestedFunctionVariable):
        for item in value.defaults:
            _collect(item, outputs, seen)
    elif value is not None and not isinstance(value, LazyInput):
        collect_tensor_outputs(value, outputs, seen)


def grad_mode_outside_blocks(frame, current: bool) -> bool:
    """The grad mode the break code starts in: the mode before the outermost open grad-mode
    `with` block (re-entering the blocks switches it again), else the current mode."""
    for var in frame.stack:
        if isinstance(var, BoundContextMethod) and isinstance(var.ctx, GradModeContextVariable):
            return var.ctx.prior_mode
    return current


class BreakStateCodegen(ReturnCodegen):
    """Expressions for the values at a break; adds what only a paused frame holds.

    A mutable object made by the trace (list, dict, set, user object) is built
    once and named (``(m0 := [...])``): CPython may mutate it after the break,
    so every place that refers to it must get the same object.
    """

    def __init__(self, codegen, output_index: dict):
        super().__init__(codegen, output_index)
        self._built: dict[int, str] = {}

    def expr(self, value) -> str:
        if isinstance(value, _MUTABLE_VARIABLES) and value.source is None:
            name = self._built.get(id(value))
            if name is None:
                name = self._built[id(value)] = f"m{len(self._built)}"
                return f"({name} := {self._expr(value)})"
            return name
        return self._expr(value)

    def _expr(self, value) -> str:
        if value is None:
            return self.codegen.consts.ref(UNBOUND, "UNBOUND")
        if isinstance(value, LazyInput):  # an argument the trace never read: passed on as is
            return self.codegen.value_of(value.source)
        if isinstance(value, GeneratorVariable):
            raise Unsupported("graph break while a generator is being iterated (not supported yet)")
        if isinstance(value, IteratorVariable):
            # A `for` loop's iterator: a list iterator over the items still to come.
            return "iter([" + ", ".join(self.expr(i) for i in value.items[value.position:]) + "])"
        if isinstance(value, TensorMethodVariable):  # a loaded method whose call breaks
            return f"{self.expr(value.tensor)}.{value.name}"
        if isinstance(value, OpaqueMethodVariable):
            return f"{self.expr(value.self_var)}.{value.name}"
        if isinstance(value, UserMethodVariable) and value.source is None \
                and isinstance(value.fn, UserFunctionVariable):  # `obj.method` loaded for a call
            method = self.codegen.consts.ref(types.MethodType, "MethodType")
            fn = self.codegen.consts.ref(value.fn.fn, value.fn.fn.__name__)
            return f"{method}({fn}, {self.expr(value.self_var)})"
        if isinstance(value, OpaqueCallableVariable):
            return self.codegen.consts.ref(value.fn, getattr(value.fn, "__name__", "fn"))
        if isinstance(value, NestedFunctionVariable) and not value.cells and not value.kwdefaults:
            # A closure-free function made in the trace (a `key=lambda ...`): made again.
            maker = self.codegen.consts.ref(types.FunctionType, "FunctionType")
            code = self.codegen.consts.ref(value.code, "code")
            globals_ = self.codegen.consts.ref(value.f_globals, "f_globals")
            defaults = "(" + "".join(self.expr(d) + ", " for d in value.defaults) + ")"
            return f"{maker}({code}, {globals_}, {value.code.co_name!r}, {defaults} or None)"
        if isinstance(value, GradModeContextVariable):
            cls = torch.enable_grad if value.target_mode else torch.no_grad
            return f"{self.codegen.consts.ref(cls, cls.__name__)}()"
        return super().expr(value)

    def state(self, state: BreakState) -> str:
        return "(" + "".join(self.expr(v) + ", " for v in state.values) + ")"


_MUTABLE_VARIABLES = (ListVariable, DictVariable, SetVariable, NewObjectVariable)


class BreakRunner:
    """Called by the entry with the rebuilt state: makes the break function and runs it."""

    def __init__(self, code, f_globals: dict, state: BreakState, call_resume):
        try:
            self.break_code = break_code(code, state.offset, state.layout, call_resume=call_resume)
        except BytecodeError as e:
            raise Unsupported(f"cannot resume after this graph break: {e}") from e
        self.f_globals = f_globals
        self.cellvars = state.cellvars
        self.parameter_count = state.parameter_count
        # Without cells the break function is the same object on every call.
        self.function = None
        if not code.co_cellvars and not code.co_freevars:
            self.function = self.break_code.make_function(f_globals, {})

    def __call__(self, fn, state: tuple):
        if self.function is not None:
            return self.function(*state)
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        for name, value in zip(self.cellvars, state[self.parameter_count:]):
            cells[name] = types.CellType() if value is UNBOUND else types.CellType(value)
        return self.break_code.make_function(self.f_globals, cells)(*state[:self.parameter_count])


class ResumeCaller:
    """``call_resume(resume_fn, *args)`` of break code: run a resume function compiled.

    ``cache_of(code)`` gives the resume code's ``CodeCache`` (shared with other
    compiles of the same backend, or private to one ``explain`` run).
    """

    def __init__(self, cache_of, options, backend, records=None):
        self.cache_of = cache_of
        self.options = options
        self.backend = backend
        self.records = records

    def __call__(self, resume_fn, *args):
        cache = self.cache_of(resume_fn.__code__)
        for run in cache.runners:
            result = run(resume_fn, args, {})
            if result is not MISS:
                return result
        return cache.miss(resume_fn, args, {}, self.options, self.backend, self.records)
