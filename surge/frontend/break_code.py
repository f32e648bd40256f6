"""Break code: what a cache entry runs after its graph when the frame breaks.

At a graph break the captured graph has run the prefix of the user's
function. The break code takes the frame's state at the break instruction as
parameters (the stack slots, then the live locals, as described by a
``FrameLayout``), rebuilds the stack (re-entering active ``with`` blocks),
lets CPython run the unsupported instruction(s) themselves, with the user's
line numbers, and then hands off to the resume function of whichever
instruction comes next: it moves the stack into temporaries, exits the
``with`` blocks (the resume function re-enters them), builds the resume
function over the frame's cells and returns ``resume_fn(*stack, *locals)``.

Like a resume function, the break code holds the user's whole body and
exception table. If the unsupported instruction raises, the user's own
handlers run (in plain CPython) exactly as they would have; if they loop back
to the break instruction, the hand-off happens there again.
"""
from __future__ import annotations

import types
from dataclasses import dataclass

from bytecode import CellVar, FreeVar, Instr, Label

from .. import logs
from .codegen_bytecode.analysis import call_start, code_facts, live_locals, pops, stack_depths
from .codegen_bytecode.assembler import (PY312, Body, BytecodeError, assemble, call, dump, forward_jump_name,
                                         load_attr, load_local_checked, make_function)
from .codegen_bytecode.layout import FrameLayout, Slot
from .resume import (ResumeCode, check_layout, mark_fresh_locals, original_position, reentry_prologue, resume_code,
                     user_location)

# Instructions that may end a break region: everything whose successors are
# the next instruction and/or one jump target. Loops' FOR_ITER and the
# exception machinery are left to the user's code around the region. (A
# BEFORE_WITH may be the region: CPython enters a context capture cannot model,
# and the resume function gets its bound __exit__ as a plain stack value.)
_NOT_IN_REGION = {"FOR_ITER", "SEND", "RETURN_VALUE", "RETURN_CONST", "RERAISE",
                  "PUSH_EXC_INFO", "POP_EXCEPT", "WITH_EXCEPT_START",
                  "PUSH_NULL", "LOAD_METHOD", "LOAD_SUPER_ATTR", "YIELD_VALUE", "RETURN_GENERATOR"}


def _pushes_null(ins) -> bool:
    """LOAD_GLOBAL's low bit (and 3.12 LOAD_ATTR's, the method form) pushes a NULL: exits
    of a region hold plain values only."""
    return (ins.opname == "LOAD_GLOBAL" or ins.opname == "LOAD_ATTR" and PY312) and bool(ins.arg & 1)


def _discard_null():
    """Called on a [NULL, _discard_null] stack pair: the one way to pop a NULL in bytecode."""


@dataclass(frozen=True)
class Exit:
    """One way out of the break region, and the resume function that continues there."""

    offset: int
    resume: ResumeCode


@dataclass(frozen=True)
class BreakCode:
    code: types.CodeType
    original: types.CodeType
    start: int                # offset of the first instruction CPython runs
    layout: FrameLayout       # the parameters, as at ``start``
    exits: tuple[Exit, ...]

    def make_function(self, globals_: dict, cells: dict | None = None) -> types.FunctionType:
        """The break function; ``cells`` maps each original cell/free variable name to its cell."""
        return make_function(self.code, globals_, cells or {})


def break_code(code: types.CodeType, offset: int, layout: FrameLayout, *, count: int = 1,
               call_resume=None) -> BreakCode:
    """Break code running ``count`` instructions of ``code`` from ``offset`` in CPython.

    ``layout`` describes the state before the instruction at ``offset``. If it
    is a CALL, the PRECALL / KW_NAMES that prepare it run too. Each exit calls
    its resume function directly, or ``call_resume(resume_fn, *args)`` when
    given (so the caller can compile resume functions when they are called).
    """
    code, offset = original_position(code, offset)
    facts = code_facts(code)
    while facts.instructions[facts.index_of[offset]].opname in ("PRECALL", "KW_NAMES"):
        offset = facts.instructions[facts.index_of[offset] + 1].offset  # the CALL they prepare
    start = call_start(code, offset)
    check_layout(code, start, layout)
    first = facts.index_of[start]
    where = user_location(code, offset)
    if facts.instructions[first].opname == "FOR_ITER" and count == 1:
        return _loop_step(code, facts, first, layout, call_resume, where)
    last = facts.index_of[offset] + count - 1
    region = facts.instructions[first:last + 1]
    for ins in region:
        if ins.opname in _NOT_IN_REGION or _pushes_null(ins):
            raise BytecodeError(f"cannot hand {ins.opname} at offset {ins.offset} to CPython in a graph break ({where})")

    stored = tuple(dict.fromkeys(ins.argval for ins in region if ins.opname == "STORE_FAST"
                                 and ins.argval not in layout.live_locals))
    body = Body(code)
    lineno = body.instr_at[offset].lineno
    prologue = reentry_prologue(body, start, layout, lineno)
    body.drop_preamble()
    body.cells_to_free()
    body.checked_local_loads()

    stubs: list = []
    exits = []
    for exit_offset, stack in _exits(code, facts, region, layout.stack):
        live = live_locals(code, exit_offset)
        resume_layout = FrameLayout(stack, tuple(n for n in layout.live_locals + stored if n in live))
        resume = resume_code(code, exit_offset, resume_layout)
        mark_fresh_locals(resume, stored)  # CPython's results
        exits.append(Exit(exit_offset, resume))
        label = Label()
        _redirect(body, facts, region, exit_offset, label)
        stubs += [label] + hand_off(resume, lineno, call_resume)

    # Named as the user's function: tracebacks from the instructions CPython runs here
    # read as the user's frame.
    new = assemble(prologue + body.items + stubs, like=code, name=code.co_name, qualname=code.co_qualname,
                   argnames=layout.param_names(), freevars=code.co_cellvars + code.co_freevars)
    if logs.enabled("bytecode"):
        logs.log("bytecode", f"break code for {code.co_qualname} at {where}, layout {layout}\n{dump(new)}")
    return BreakCode(new, code, start, layout, tuple(exits))


# What may follow a loop's FOR_ITER in the step a break hands to CPython: the stores of
# the item into the loop's target (``for i, (a, b) in ...``), as long as they are all fast locals.
_LOOP_TARGET = {"STORE_FAST", "UNPACK_SEQUENCE"}


def _loop_step(code, facts, first: int, layout: FrameLayout, call_resume, where: str) -> BreakCode:
    """Break code for one step of a ``for`` loop: CPython runs the FOR_ITER (and the stores
    of the item into fast locals that follow it), then calls the resume function at the
    body's start, or, once the iterator is exhausted, the one after the loop.

    The resume function that traced up to this FOR_ITER had resumed inside the loop: each
    iteration now goes through the same resume functions (``ResumedLoopIterator``). On
    3.12 an exhausted FOR_ITER pops the iterator and jumps past the END_FOR at its target;
    the exit's stub starts with an END_FOR CPython skips, as the compiler's code does.
    """
    depths = stack_depths(code)
    for_iter = facts.instructions[first]
    depth = depths[for_iter.offset]
    last = first
    position = first + 1
    while position < len(facts.instructions) and facts.instructions[position].opname in _LOOP_TARGET:
        following = facts.instructions[position + 1] if position + 1 < len(facts.instructions) else None
        if following is None or following.offset not in depths:
            break
        if depths[following.offset] <= depth:
            if depths[following.offset] == depth:
                last = position  # the item is stored
            break
        position += 1
    region = facts.instructions[first:last + 1]
    stored = tuple(dict.fromkeys(ins.argval for ins in region if ins.opname == "STORE_FAST"
                                 and ins.argval not in layout.live_locals))
    body_offset = facts.instructions[last + 1].offset
    body_stack = layout.stack + ((Slot.VALUE,) if last == first else ())
    done_position = facts.index_of[for_iter.argval] + (1 if PY312 else 0)  # 3.12: past END_FOR
    done_offset = facts.instructions[done_position].offset
    done_stack = layout.stack[:-1]
    if layout.stack[-1] is not Slot.VALUE or depths.get(done_offset) != len(done_stack) \
            or depths.get(body_offset) != len(body_stack):
        raise BytecodeError(f"cannot hand the loop step at offset {for_iter.offset} to CPython ({where})")

    body = Body(code)
    lineno = body.instr_at[for_iter.offset].lineno
    prologue = reentry_prologue(body, for_iter.offset, layout, lineno)
    body.drop_preamble()
    body.cells_to_free()
    body.checked_local_loads()

    exits, stubs = [], []
    for exit_offset, stack in ((body_offset, body_stack), (done_offset, done_stack)):
        live = live_locals(code, exit_offset)
        resume = resume_code(code, exit_offset, FrameLayout(stack, tuple(
            n for n in layout.live_locals + stored if n in live)))
        exits.append(Exit(exit_offset, resume))
    body_label, done_label = Label(), Label()
    body.instr_at[for_iter.offset].arg = done_label
    end = body.instr_at[region[-1].offset]
    body.items.insert(body.position(end) + 1, Instr("JUMP_FORWARD", body_label, lineno=end.lineno))
    stubs += [body_label] + hand_off(exits[0].resume, lineno, call_resume)
    stubs += [done_label] + ([Instr("END_FOR", lineno=lineno)] if PY312 else []) \
        + hand_off(exits[1].resume, lineno, call_resume)
    new = assemble(prologue + body.items + stubs, like=code, name=code.co_name, qualname=code.co_qualname,
                   argnames=layout.param_names(), freevars=code.co_cellvars + code.co_freevars)
    if logs.enabled("bytecode"):
        logs.log("bytecode", f"loop step code for {code.co_qualname} at {where}, layout {layout}\n{dump(new)}")
    return BreakCode(new, code, for_iter.offset, layout, tuple(exits))


def _exits(code, facts, region, stack: tuple[Slot, ...]):
    """(offset, stack slots) for each place control leaves the region.

    Slots below the lowest depth the region pops down to are untouched; slots
    above it were pushed by the region and are plain values (the region may
    not push NULLs, checked by the caller).
    """
    depths = stack_depths(code)
    inside = {ins.offset for ins in region}
    lowest = len(stack)
    found: dict[int, tuple[Slot, ...]] = {}
    for ins in region:
        lowest = min(lowest, depths[ins.offset] - pops(ins))
        for succ, _ in facts.successors(facts.index_of[ins.offset]):
            target = facts.instructions[succ].offset
            if target not in inside and target not in found:
                found[target] = stack[:lowest] + (Slot.VALUE,) * (depths[target] - lowest)
    if not found and region[-1].opname != "RAISE_VARARGS":
        raise BytecodeError(f"the break region at {user_location(code, region[0].offset)} never continues")
    return list(found.items())  # none after a `raise`: the user's handlers (or the caller) take over


def _redirect(body: Body, facts, region, exit_offset: int, label: Label) -> None:
    """Send every edge from the region to ``exit_offset`` to ``label`` instead."""
    for ins in region:
        instr = body.instr_at[ins.offset]
        if isinstance(instr.arg, Label) and ins.argval == exit_offset:
            instr.name = forward_jump_name(instr.name)
            instr.arg = label
    last = region[-1]
    position = facts.index_of[last.offset]
    if position + 1 < len(facts.instructions) and facts.instructions[position + 1].offset == exit_offset \
            and last.opname not in ("JUMP_FORWARD", "JUMP_BACKWARD"):
        instr = body.instr_at[last.offset]
        body.items.insert(body.position(instr) + 1, Instr("JUMP_FORWARD", label, lineno=instr.lineno))


def hand_off(resume: ResumeCode, lineno, call_resume, cellvars=()) -> list:
    """Pop the exit's stack into temporaries, leave `with` blocks, return resume_fn(*stack, *locals).

    ``cellvars`` names the cells that the surrounding code holds as its own
    cell variables rather than as free variables.
    """
    items: list = []
    stack = resume.layout.stack
    temps = {}
    for depth in range(len(stack) - 1, -1, -1):  # top of the stack first
        slot = stack[depth]
        if slot is Slot.NULL:
            items += [Instr("LOAD_CONST", _discard_null, lineno=lineno), *call(0, lineno), Instr("POP_TOP", lineno=lineno)]
            continue
        temps[depth] = f"__surge_handoff_{depth}"
        if slot is Slot.WITH:  # the stack holds the bound __exit__; its __self__ is the manager
            items += [Instr("COPY", 1, lineno=lineno), load_attr("__self__", lineno),
                      Instr("STORE_FAST", temps[depth], lineno=lineno),
                      Instr("PUSH_NULL", lineno=lineno), Instr("SWAP", 2, lineno=lineno)]
            items += [Instr("LOAD_CONST", None, lineno=lineno)] * 3
            items += [*call(3, lineno), Instr("POP_TOP", lineno=lineno)]
        else:
            items.append(Instr("STORE_FAST", temps[depth], lineno=lineno))
    items.append(Instr("PUSH_NULL", lineno=lineno))
    if call_resume is not None:
        items.append(Instr("LOAD_CONST", call_resume, lineno=lineno))
    free = resume.code.co_freevars
    for name in free:
        items.append(Instr("LOAD_CLOSURE", CellVar(name) if name in cellvars else FreeVar(name), lineno=lineno))
    if free:
        items.append(Instr("BUILD_TUPLE", len(free), lineno=lineno))
    items += [Instr("LOAD_CONST", resume.code, lineno=lineno), Instr("MAKE_FUNCTION", 8 if free else 0, lineno=lineno)]
    args = [temps[d] for d in range(len(stack)) if d in temps] + list(resume.layout.live_locals)
    items += [load_local_checked(a, lineno) for a in args]
    items += call(len(args) + (call_resume is not None), lineno)
    items.append(Instr("RETURN_VALUE", lineno=lineno))
    return items


