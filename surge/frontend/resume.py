"""Resume functions: the rest of a user function, entered right after a graph break.

A resume function for (code, offset, layout) is the user's whole function body
with a new entry: its parameters are the live value-stack slots at ``offset``
followed by the live fast locals; its prologue pushes the stack back (NULLs of
pending calls included), re-enters the active ``with`` blocks, and jumps to
``offset``. Everything after that is the original instructions and the
original exception table, so later loop iterations, ``except``/``finally``
handlers and ``with`` exits run exactly as in the user's frame. The original
cell variables become free variables: the caller passes the frame's cell
objects, so closures made before the break keep sharing them.

Resume code objects are cached per (code, offset, layout); a function object
is made per call with ``ResumeCode.make_function`` (cheap: it only binds the
closure and globals).
"""
from __future__ import annotations

import itertools
import types
import weakref
from dataclasses import dataclass

from bytecode import Instr, TryBegin, TryEnd

from .. import logs
from .code_kinds import RESUME_CODES
from .codegen_bytecode.analysis import call_start, code_facts, stack_depths
from .codegen_bytecode.layout import FrameLayout, Slot
from .codegen_bytecode.assembler import Body, BytecodeError, assemble, dump, make_function


@dataclass(frozen=True)
class ResumeCode:
    code: types.CodeType
    original: types.CodeType
    offset: int
    layout: FrameLayout

    def make_function(self, globals_: dict, cells: dict | None = None) -> types.FunctionType:
        """The resume function; ``cells`` maps each original cell/free variable name to its cell."""
        return make_function(self.code, globals_, cells or {})


def user_location(code: types.CodeType, offset: int) -> str:
    facts = code_facts(code)
    ins = facts.instructions[facts.index_of[offset]]
    line = ins.positions.lineno if ins.positions and ins.positions.lineno else code.co_firstlineno
    return f"{code.co_filename}:{line}"


def check_layout(code: types.CodeType, offset: int, layout: FrameLayout) -> None:
    """Raise unless ``layout`` fits the code's stack at ``offset`` and names real locals."""
    where = user_location(code, offset)
    depths = stack_depths(code)
    if offset not in depths:
        raise BytecodeError(f"offset {offset} of {code.co_qualname} is not a reachable instruction ({where})")
    if depths[offset] != len(layout.stack):
        raise BytecodeError(f"layout has {len(layout.stack)} stack slots but {code.co_qualname} has "
                            f"{depths[offset]} at offset {offset} ({where})")
    unknown = [n for n in layout.live_locals if n not in code.co_varnames or n in code.co_cellvars]
    if unknown:
        raise BytecodeError(f"{unknown} are not fast locals of {code.co_qualname} ({where})")
    if "__class__" in code.co_freevars and "super" in code.co_names:
        # Zero-argument super() reads the frame's first local, which generated code
        # takes from its own first parameter (a stack slot or another local).
        raise BytecodeError(f"{code.co_qualname} calls super() without arguments ({where})")


def reentry_prologue(body: Body, offset: int, layout: FrameLayout, lineno: int | None) -> list:
    """Instructions that rebuild ``layout``'s stack from the parameters and jump to ``offset``.

    Each ``with`` slot is re-entered with BEFORE_WITH; the prologue after it is
    covered by that block's own exception handler, so a failure while entering
    an inner block exits the outer ones as the original code would.
    """
    free = len(body.code.co_cellvars) + len(body.code.co_freevars)
    items: list = [Instr("COPY_FREE_VARS", free, lineno=lineno)] if free else []
    items.append(Instr("RESUME", 0, lineno=lineno))
    target = body.label_before(offset)
    names = iter(layout.param_names())
    open_range = None
    for depth, slot in enumerate(layout.stack):
        if slot is Slot.NULL:
            items.append(Instr("PUSH_NULL", lineno=lineno))
            continue
        items.append(Instr("LOAD_FAST", next(names), lineno=lineno))
        if slot is Slot.WITH:
            handler = _with_handler(body, offset, depth)
            if open_range is not None:
                items.append(TryEnd(open_range))
            items.append(Instr("BEFORE_WITH", lineno=lineno))
            open_range = TryBegin(handler.target, handler.push_lasti, handler.stack_depth)
            items += [open_range, Instr("POP_TOP", lineno=lineno)]
    if open_range is not None:
        items.append(TryEnd(open_range))
    items.append(Instr("JUMP_FORWARD", target, lineno=lineno))
    return items


def _with_handler(body: Body, offset: int, depth: int) -> TryBegin:
    """The exception-table range of the `with` block whose __exit__ sits at stack slot ``depth``.

    It is the range covering the instruction after the last BEFORE_WITH before
    ``offset`` that leaves __exit__ at that depth: a later block at the same
    depth would have to be nested in it, which is impossible.
    """
    depths = stack_depths(body.code)
    facts = code_facts(body.code)
    found = None
    for ins in facts.instructions[:facts.index_of[offset]]:
        if ins.opname == "BEFORE_WITH" and depths.get(ins.offset) == depth + 1:
            found = ins
    if found is None:
        raise BytecodeError(f"stack slot {depth} is marked as a `with` block but no `with` statement "
                            f"puts one there ({user_location(body.code, offset)})")
    after = facts.instructions[facts.index_of[found.offset] + 1]
    handler = body.try_of.get(id(body.instr_at[after.offset]))
    # The handler's depth counts the slots below __exit__ and __exit__ itself.
    if handler is None or handler.stack_depth != depth + 1:
        raise BytecodeError(f"no exception handler found for the `with` block at {user_location(body.code, found.offset)}")
    return handler


_names = itertools.count()
_RESUME_CACHE: dict[tuple, ResumeCode] = {}
_USER_NAMES: "weakref.WeakKeyDictionary[types.CodeType, str]" = weakref.WeakKeyDictionary()
# Parameters of a resume code that may hold an object made anew on every call (a value
# the break code computed, an object the frame built): guarded by type, never identity.
_FRESH_PARAMETERS: "weakref.WeakKeyDictionary[types.CodeType, set[str]]" = weakref.WeakKeyDictionary()


def fresh_parameters(code: types.CodeType) -> frozenset:
    return frozenset(_FRESH_PARAMETERS.get(code, ()))


def mark_fresh_locals(resume: ResumeCode, names) -> None:
    """Live locals of ``resume`` that a break hands over as objects made per call."""
    _FRESH_PARAMETERS.setdefault(resume.code, set()).update(n for n in names if n in resume.layout.live_locals)


def user_name(code: types.CodeType) -> str:
    """The user's function name, also for generated code made from generated code."""
    return _USER_NAMES.get(code, code.co_name)


def resume_code(code: types.CodeType, offset: int, layout: FrameLayout) -> ResumeCode:
    """The resume code object that continues ``code`` at ``offset`` (cached).

    ``layout`` is the state before that instruction; a CALL is entered at its
    KW_NAMES / PRECALL, which do not change the stack.
    """
    offset = call_start(code, offset)
    key = (code, offset, layout)
    found = _RESUME_CACHE.get(key)
    if found is not None:
        return found
    check_layout(code, offset, layout)
    body = Body(code)
    lineno = body.instr_at[offset].lineno
    prologue = reentry_prologue(body, offset, layout, lineno)
    body.drop_preamble()
    body.cells_to_free()
    body.checked_local_loads()
    line = lineno if lineno is not None else code.co_firstlineno
    name = f"__surge_resume_{user_name(code)}_at_{line}_{next(_names)}"
    qualname = code.co_qualname.rpartition(code.co_name)[0] + name
    new = assemble(prologue + body.items, like=code, name=name, qualname=qualname,
                   argnames=layout.param_names(), freevars=code.co_cellvars + code.co_freevars)
    if logs.enabled("bytecode"):
        logs.log("bytecode", f"resume function for {code.co_qualname} at offset {offset} "
                             f"({user_location(code, offset)}), layout {layout}\n{dump(new)}")
    found = ResumeCode(new, code, offset, layout)
    _RESUME_CACHE[key] = found
    RESUME_CODES.add(new)
    _USER_NAMES[new] = user_name(code)
    # Stack slots hold temporaries: the break instruction's result among them.
    _FRESH_PARAMETERS[new] = {n for n in layout.param_names() if n not in layout.live_locals}
    return found
