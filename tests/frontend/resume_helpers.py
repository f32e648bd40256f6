"""Running a user function as prefix (CPython) + break code + resume function.

``stop_function`` builds a function that runs the user's code from its entry
and, at the break offset, hands its state to a collector instead of running
the break instruction: the same hand-off the break code uses, so the state a
test passes to the break code is the real frame state at the break.
"""
from __future__ import annotations

import contextlib
import io
import sys
import types

from bytecode import Instr, Label

from surge.frontend.break_code import break_code, hand_off
from surge.frontend.codegen_bytecode.analysis import call_start, code_facts, live_locals
from surge.frontend.codegen_bytecode.assembler import Body, assemble
from surge.frontend.codegen_bytecode.layout import FrameLayout, Slot, stack_slots
from surge.frontend.resume import resume_code


class Stopped:
    def __init__(self, resume_fn, args):
        self.resume_fn = resume_fn
        self.args = args


def _collect(resume_fn, *args):
    return Stopped(resume_fn, args)


def method_slot_for(fn):
    """Method loads on a global module (``torch.stack``) push NULL; on objects, the bound method."""
    instructions = code_facts(fn.__code__).instructions
    index = {ins.offset: n for n, ins in enumerate(instructions)}

    def decide(ins):
        owner = instructions[index[ins.offset] - 1]
        if owner.opname == "LOAD_GLOBAL" and isinstance(fn.__globals__.get(owner.argval), types.ModuleType):
            return Slot.NULL
        return Slot.VALUE

    return decide


def layout_at(fn, offset) -> FrameLayout:
    code = fn.__code__
    return FrameLayout(stack_slots(code, offset, method_slot=method_slot_for(fn)), live_locals(code, offset))


def stop_function(fn, offset, layout):
    """fn's code, stopping before ``offset`` with a ``Stopped`` holding the frame state."""
    code = fn.__code__
    body = Body(code)
    label = Label()
    target = body.instr_at[offset]
    body.items.insert(body.position(target), Instr("JUMP_FORWARD", label, lineno=target.lineno))
    resume = resume_code(code, offset, layout)
    stub = [label] + hand_off(resume, target.lineno, _collect, cellvars=set(code.co_cellvars))
    new = assemble(body.items + stub, like=code, name=code.co_name + "_stop", qualname=code.co_qualname + "_stop",
                   argnames=code.co_varnames[:code.co_argcount], freevars=code.co_freevars,
                   cellvars=code.co_cellvars)
    return types.FunctionType(new, fn.__globals__, new.co_name, None, fn.__closure__)


def break_offsets(fn, opnames=("CALL",)):
    """Offsets of instructions named in ``opnames`` (where a frontend would break)."""
    return [i.offset for i in code_facts(fn.__code__).instructions if i.opname in opnames]


def run_with_break(fn, args, offset, *, use_break_code=True):
    """fn(*args) computed as stop-at-offset, then break code (or resume at offset)."""
    code = fn.__code__
    offset = call_start(code, offset)
    layout = layout_at(fn, offset)
    stopped = stop_function(fn, offset, layout)(*args)
    if not isinstance(stopped, Stopped):
        return stopped  # the path from the entry did not reach the break
    cells = dict(zip(stopped.resume_fn.__code__.co_freevars, stopped.resume_fn.__closure__ or ()))
    if use_break_code:
        fn2 = break_code(code, offset, layout).make_function(fn.__globals__, cells)
    else:
        fn2 = stopped.resume_fn
    return fn2(*stopped.args)


def outcome(thunk):
    """(result or exception type+message, printed text) of running ``thunk``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            result = ("ok", thunk())
        except Exception as exc:  # compared with the original's exception
            result = ("raised", type(exc), str(exc))
    return result, out.getvalue()
