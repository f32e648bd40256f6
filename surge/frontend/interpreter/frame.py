"""One frame of the symbolic interpreter: a function's bytecode run over symbolic values.

A frame has what CPython's frame has — a value stack, local variables, cells,
an instruction pointer — plus the ``with`` blocks open at the current
instruction. That is the state a graph break needs to stop capture at an
instruction and hand the rest to CPython (``snapshot``).
"""
from __future__ import annotations

import os
import types
from dataclasses import dataclass

import torch

from ...errors import Unsupported
from ..variables.base import RaisedInUserCode
from ..bytecode import Instruction, decode, source_line
from ..variables.base import Variable, unsupported
from ..variables.functions import CellVariable
from .registry import HANDLERS

# Frames from torch's own Python files are library code: locations point past them.
_TORCH_DIR = os.path.dirname(torch.__file__)
_SURGE_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Code shipped with surge that users compile as their own: the bundled models, the bench's workloads.
_SURGE_USER_LEVEL = tuple(os.path.join(_SURGE_PACKAGE, sub) + os.sep for sub in ("models", "tools"))

# Instructions that run a handler's bookkeeping: a break cannot hand them to CPython.
_EXCEPTION_MACHINERY = {"PUSH_EXC_INFO", "POP_EXCEPT", "WITH_EXCEPT_START", "CHECK_EXC_MATCH", "RERAISE"}

# A trace that runs this many instructions is most likely an endless loop.
MAX_INSTRUCTIONS = 2_000_000


class LazyInput:
    """A root-frame argument, wrapped (and guarded) on first read."""

    def __init__(self, value, source):
        self.value = value
        self.source = source


# Instructions that change state outside their frame (counted: ``Tracer.writes``).
_WRITES = frozenset({"STORE_ATTR", "DELETE_ATTR", "STORE_SUBSCR", "DELETE_SUBSCR", "STORE_SLICE", "STORE_GLOBAL",
                     "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF"})


@dataclass
class FrameSnapshot:
    instruction: int
    stack: list
    locals: dict
    blocks: list


class StopForBreak(Exception):
    """Raised by a root frame when it reaches the instruction a graph break hands to CPython."""

    def __init__(self, frame, instruction: Instruction):
        super().__init__(instruction.offset)
        self.frame = frame
        self.instruction = instruction


class Frame:
    def __init__(self, tracer, code, f_globals: dict, local_vars: dict, cells: dict, parent=None,
                 name: str | None = None, is_generator=False):
        self.tracer = tracer
        self.code = code
        tracer.note_code(code, f_globals)
        self.f_globals = f_globals
        self.decoded = decode(code)
        self.instructions: list[Instruction] = self.decoded.instructions
        self.locals: dict = local_vars
        self.cells: dict[str, CellVariable] = cells
        self.parent = parent
        self.name = name or code.co_name
        self.stack: list[Variable] = []
        self.ip = 0
        self.current: Instruction | None = None
        self.kw_names: tuple = ()
        self.calling = None  # the callable of the last CALL run
        # Open `with` blocks (their context variables), innermost last.
        self.block_stack: list = []
        self.return_value: Variable | None = None
        self.done = False
        # Generator frames pause at each yield (``yielded`` holds the value) and
        # are resumed by whoever iterates them.
        self.is_generator = is_generator
        self.generator_handled: list = []
        self.paused = False
        self.yielded: Variable | None = None
        # A root frame re-traced for a graph break stops before the instruction
        # that starts when the tracer has run this many (``StopForBreak``).
        self.stop_count = -1
        self.current_count = -1  # the trace's instruction count when ``current`` started
        # (offset, count) of the last instruction whose exception a handler caught outside
        # any running handler, and that point for each handler running now, outermost
        # first: a graph break inside a handler splits the frame there.
        self.raised_at: tuple | None = None
        self.handler_raises: list = []

    # ---- stack ---------------------------------------------------------------

    def push(self, value: Variable) -> None:
        self.stack.append(value)

    def pop(self) -> Variable:
        return self.stack.pop()

    def popn(self, n: int) -> list:
        if n == 0:
            return []
        values = self.stack[-n:]
        del self.stack[-n:]
        return values

    def peek(self, depth: int = 1) -> Variable:
        return self.stack[-depth]

    def jump(self, inst: Instruction) -> None:
        self.ip = inst.target

    # ---- locals ----------------------------------------------------------------

    def load_local(self, name: str) -> Variable:
        if name in self.cells and name not in self.locals:
            return self.cells[name].load(self.tracer)
        value = self.locals.get(name)
        if value is None:
            unsupported(f"local variable {name!r} referenced before assignment")
        if isinstance(value, LazyInput):
            value = self.tracer.wrap(value.value, value.source)
            self.locals[name] = value
        return value

    def snapshot(self) -> FrameSnapshot:
        return FrameSnapshot(self.ip, list(self.stack), dict(self.locals), list(self.block_stack))

    # ---- running ---------------------------------------------------------------

    def run(self) -> Variable:
        tracer = self.tracer
        previous = tracer.current_frame
        tracer.current_frame = self
        count = -1
        try:
            while not self.done and not self.paused:
                inst = self.instructions[self.ip]
                count = self.current_count = tracer.instruction_count
                if count == self.stop_count:
                    raise StopForBreak(self, inst)
                self.current = inst
                self.ip += 1
                tracer.instruction_count = count + 1
                if tracer.instruction_count > MAX_INSTRUCTIONS:
                    unsupported("the trace ran too many instructions (an endless loop?)")
                handler = HANDLERS.get(inst.opname)
                if handler is None:
                    unsupported(f"bytecode {inst.opname} is not supported")
                if inst.opname in _WRITES:
                    tracer.writes += 1
                try:
                    handler(self, inst)
                except RaisedInUserCode as raised:
                    if not self.enter_exception_handler(inst, raised):
                        raise
                    # Raised inside a running handler: that handler's own raise is where
                    # CPython can take over (it re-enters the handler itself).
                    outer = self.handler_raises[0] if self.handler_raises else None
                    self.raised_at = outer if outer is not None else (inst.offset, count)
        except Unsupported as e:
            if e.location is None:
                attach_location(e, self)
                e.inside_call = self.parent is not None
            if self.parent is None and count >= 0 and getattr(e, "root_instruction", None) is None:
                # Where a graph break would split the root frame: before this instruction
                # (the CALL of the inlined function that failed, when it failed inside one),
                # or, when the exception machinery fails (re-raising from a `with` exit or a
                # `finally`), before the instruction that raised: CPython raises it again and
                # runs the user's handlers.
                e.root_instruction = (self.current.offset, count)
                if self.current.opname in _EXCEPTION_MACHINERY and self.raised_at is not None:
                    e.root_instruction = self.raised_at
                if self.handler_raises and self.handler_raises[0] is not None and self.handler_needs_exc_info():
                    # A resume function inside a handler would run with no exception being
                    # handled: CPython raises the exception again and runs the handler.
                    e.root_instruction = self.handler_raises[0]
                if getattr(e, "inside_call", False) and self.current.opname in ("CALL", "CALL_FUNCTION_EX"):
                    where = f"{os.path.basename(self.code.co_filename)}:{self.current.lineno}"
                    e.root_call = f"{self.name} breaks at its call at {where}"
            raise
        finally:
            tracer.current_frame = previous
        return self.return_value

    def resume(self, parent, sent: Variable | None = None) -> Variable | None:
        """Run a generator frame to its next yield; None once it has returned."""
        if self.done:
            return None
        if self.paused:
            self.paused = False
            from ..variables.constant import NONE

            self.push(sent or NONE)  # the value "sent" into the generator (None by next())
        self.parent = parent
        return self._run_generator()

    def throw(self, parent, raised: RaisedInUserCode) -> Variable | None:
        """``generator.throw(exc)``: raise it at the paused ``yield``, where the generator's
        own handlers catch it; the next value it yields, None once it has returned."""
        if self.done or not self.paused:  # finished or not started: raised right here
            self.done = True
            raise raised
        self.paused = False
        self.parent = parent
        if not self.enter_exception_handler(self.instructions[self.ip - 1], raised):
            self.done = True
            raise raised
        return self._run_generator()

    def _run_generator(self) -> Variable | None:
        # A generator keeps the exceptions its own handlers are handling while it is
        # paused (CPython's gi_exc_state): they are "being handled" only while it runs,
        # on top of whatever its caller handles.
        handled = self.tracer.handled_exceptions
        base = len(handled)
        handled.extend(self.generator_handled)
        try:
            self.run()
        except RaisedInUserCode:
            self.done = True  # an exception leaving a generator finishes it
            raise
        finally:
            self.generator_handled = handled[base:]
            del handled[base:]
        return None if self.done else self.yielded

    def handler_needs_exc_info(self) -> bool:
        """Whether the rest of the running handler may depend on the exception being
        handled (a bare ``raise``, an exception raised with it as ``__context__``, a call
        that reads ``sys.exc_info()``), rather than only on the exception object. The
        call handed to CPython counts too unless it is a C builtin other than ``next``
        (Python code may read it, a generator resumed there chains its exceptions to it)."""
        index = self.current.index
        end = max((entry.end for entry in self.decoded.exception_table
                   if entry.lasti and entry.start <= index <= entry.end), default=index)
        if self.current.opname in ("CALL", "CALL_FUNCTION_EX") and not _plain_builtin(self.calling):
            return True
        return any(ins.opname in ("CALL", "CALL_FUNCTION_EX", "RAISE_VARARGS")
                   for ins in self.instructions[index + 1:end + 1])

    def enter_exception_handler(self, inst: Instruction, raised) -> bool:
        """Jump to the handler covering ``inst`` (CPython's exception table), if any."""
        for entry in self.decoded.exception_table:
            if entry.start <= inst.index <= entry.end:
                from ..variables.constant import ConstantVariable
                from ..variables.exceptions import exception_of

                del self.stack[entry.depth:]
                if entry.lasti:
                    self.push(ConstantVariable(inst.offset))
                self.push(exception_of(self.tracer, raised))
                self.ip = entry.target
                return True
        return False

    # ---- provenance --------------------------------------------------------------

    def root_point(self) -> tuple[int, int]:
        """(offset, count) of the root frame's instruction running now: where a graph
        break would split the root frame to let CPython make what is being made."""
        root = self.chain()[0]
        return root.current.offset, root.current_count

    def root_split_point(self) -> tuple[int, int]:
        """Where the root frame can be split to let CPython make what is being made: its
        current instruction, or, inside a handler, the instruction that raised what the
        handler handles (a resume function would run the handler with no exception
        being handled; CPython raises it again instead)."""
        root = self.chain()[0]
        if root.handler_raises and root.handler_raises[0] is not None:
            return root.handler_raises[0]
        return root.root_point()

    def lineno(self) -> int:
        return self.current.lineno if self.current is not None else self.code.co_firstlineno

    def chain(self) -> list["Frame"]:
        frames, frame = [], self
        while frame is not None:
            frames.append(frame)
            frame = frame.parent
        return frames[::-1]

    def stack_trace(self) -> str:
        lines = []
        for frame in self.chain():
            lineno = frame.lineno()
            lines.append(f'  File "{frame.code.co_filename}", line {lineno}, in {frame.name}')
            text = source_line(frame.code.co_filename, lineno)
            if text:
                lines.append(f"    {text}")
        return "\n".join(lines)


def _plain_builtin(callee) -> bool:
    """A C function of ``builtins`` that runs no Python code of its own nor resumes a
    generator (``print``, ``len``; not ``next``)."""
    fn = getattr(callee, "fn", None)
    return isinstance(fn, types.BuiltinFunctionType) and getattr(fn, "__module__", None) == "builtins" \
        and fn is not next


def is_user_code(filename: str) -> bool:
    """Not torch's code nor surge's own (surge's bundled models and workloads count as user code)."""
    if filename.startswith(_TORCH_DIR):
        return False
    if filename.startswith(_SURGE_PACKAGE + os.sep):
        return filename.startswith(_SURGE_USER_LEVEL)
    return True


def attach_location(error: Unsupported, frame: Frame) -> None:
    """Name the innermost user frame (not torch's own code) in the error."""
    chain = frame.chain()
    user = [f for f in chain if is_user_code(f.code.co_filename)] or chain
    where = user[-1]
    lineno = where.lineno()
    text = source_line(where.code.co_filename, lineno)
    error.location = f"{where.code.co_filename}:{lineno} in {where.name}" + (f": {text}" if text else "")
    error.user_file = where.code.co_filename
    error.user_line = lineno
    error.source_text = text
    error.args = (f"{error.reason}\n  at {error.location}",)

