"""Handlers for stack shuffling, constants, locals, globals and closure cells."""
from __future__ import annotations

import builtins
import os

import torch

from ..sources import ConstSource, GlobalSource
from ..variables.base import NULL, unsupported
from ..variables.constant import NONE, ConstantVariable
from ..variables.exceptions import raise_name_error
from ..variables.functions import CellVariable
from .registry import opcode

_TORCH_DIR = os.path.dirname(torch.__file__)


@opcode("NOP", "RESUME", "PRECALL", "EXTENDED_ARG", "COPY_FREE_VARS", "CACHE")
def _nop(frame, inst):
    pass


@opcode("POP_TOP")
def _pop_top(frame, inst):
    frame.pop()


@opcode("PUSH_NULL")
def _push_null(frame, inst):
    frame.push(NULL)


@opcode("COPY")
def _copy(frame, inst):
    frame.push(frame.peek(inst.arg))


@opcode("SWAP")
def _swap(frame, inst):
    s = frame.stack
    s[-1], s[-inst.arg] = s[-inst.arg], s[-1]


@opcode("LOAD_CONST")
def _load_const(frame, inst):
    # Constants of a code object (numbers, strings, tuples of them, nested code) are immutable.
    frame.push(ConstantVariable(inst.argval))


@opcode("LOAD_FAST", "LOAD_FAST_CHECK")
def _load_fast(frame, inst):
    frame.push(frame.load_local(inst.argval))


@opcode("LOAD_FAST_AND_CLEAR", versions=(3, 12))
def _load_fast_and_clear(frame, inst):
    # Inlined comprehensions save the outer variable of the same name here.
    name = inst.argval
    frame.push(frame.load_local(name) if name in frame.locals else NULL)
    frame.locals.pop(name, None)


@opcode("STORE_FAST")
def _store_fast(frame, inst):
    value = frame.pop()
    if value is NULL:
        frame.locals.pop(inst.argval, None)
    else:
        frame.locals[inst.argval] = value


@opcode("DELETE_FAST")
def _delete_fast(frame, inst):
    frame.locals.pop(inst.argval, None)


def load_global(frame, name: str):
    tracer = frame.tracer
    stored = tracer.side_effects.global_value(GlobalSource(frame.f_globals, name))
    if stored is not None:
        return stored
    # Globals of torch's own modules are trusted; the user's are guarded.
    trusted = frame.code.co_filename.startswith(_TORCH_DIR)
    if name in frame.f_globals:
        source = None if trusted else GlobalSource(frame.f_globals, name)
        return tracer.wrap(frame.f_globals[name], source)
    if not trusted:
        # A builtin: guard that no global of that name appears later and shadows it.
        globals_source = ConstSource(frame.f_globals, "G")
        tracer.guards.add(globals_source, f"{name!r} not in {{v}}", f"{name!r} is not a global (builtin {name})")
    builtins_dict = frame.f_globals.get("__builtins__", builtins.__dict__)
    if not isinstance(builtins_dict, dict):
        builtins_dict = builtins_dict.__dict__
    if builtins_dict is builtins.__dict__:
        builtins_dict = tracer.builtins  # the program's, whatever surge's own code runs with
    if name in builtins_dict:
        value = builtins_dict[name]
        if value is not getattr(builtins, name, value) or name not in builtins.__dict__:
            # One the program put there (an lru_cache of len): guarded to still be there.
            ref = tracer.guards.consts.ref(value, name)
            tracer.guards.add(ConstSource(builtins.__dict__, "builtins_dict"), f"{{v}}.get({name!r}) is {ref}",
                              f"builtins.{name} is the program's {type(value).__name__}")
        return tracer.wrap(value, None)
    # CPython's NameError, raised in the trace (a handler around it catches it, chained to
    # the exception being handled), while neither dict gains the name.
    tracer.guards.add(ConstSource(builtins_dict, "builtins_dict"), f"{name!r} not in {{v}}",
                      f"{name!r} is not a builtin")
    raise_name_error(tracer, name)


@opcode("LOAD_GLOBAL")
def _load_global(frame, inst):
    if inst.arg & 1:
        frame.push(NULL)
    frame.push(load_global(frame, inst.argval))


@opcode("LOAD_NAME")
def _load_name(frame, inst):
    frame.push(load_global(frame, inst.argval))


@opcode("STORE_GLOBAL")
def _store_global(frame, inst):
    frame.tracer.side_effects.store_global(GlobalSource(frame.f_globals, inst.argval), frame.pop())


@opcode("DELETE_GLOBAL", "STORE_NAME", "DELETE_NAME")
def _delete_global(frame, inst):
    unsupported(f"{inst.opname} {inst.argval!r} in compiled code")


@opcode("MAKE_CELL")
def _make_cell(frame, inst):
    name = inst.argval
    initial = frame.load_local(name) if name in frame.locals else None
    frame.locals.pop(name, None)
    frame.cells[name] = CellVariable(initial)


@opcode("LOAD_CLOSURE")
def _load_closure(frame, inst):
    frame.push(frame.cells[inst.argval])


@opcode("LOAD_DEREF", "LOAD_CLASSDEREF")
def _load_deref(frame, inst):
    frame.push(frame.cells[inst.argval].load(frame.tracer))


@opcode("STORE_DEREF")
def _store_deref(frame, inst):
    frame.cells[inst.argval].store(frame.tracer, frame.pop())


@opcode("DELETE_DEREF")
def _delete_deref(frame, inst):
    unsupported("del of a closure variable")


@opcode("RETURN_VALUE")
def _return_value(frame, inst):
    frame.return_value = frame.pop()
    frame.done = True


@opcode("RETURN_CONST", versions=(3, 12))
def _return_const(frame, inst):
    frame.return_value = ConstantVariable(inst.argval)
    frame.done = True


@opcode("RETURN_GENERATOR")
def _return_generator(frame, inst):
    # The value "sent" into a generator when it first runs.
    frame.push(NONE)


@opcode("YIELD_VALUE")
def _yield_value(frame, inst):
    if not frame.is_generator:
        unsupported("yield outside a generator frame")
    frame.yielded = frame.pop()
    frame.paused = True
