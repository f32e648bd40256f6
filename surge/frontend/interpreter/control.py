"""Handlers for jumps, loops, iteration and raising.

Branches are decided now, on Python values the guards fix; a branch on a
tensor's value is data-dependent and cannot be captured. Loops are unrolled.
"""
from __future__ import annotations

from ..variables.base import NULL, RaisedInUserCode, unsupported
from ..variables.constant import NONE, ConstantVariable
from ..variables.objects import ClassVariable, ExceptionVariable
from ..variables.containers import IteratorVariable
from ..variables.tensor import TensorVariable
from .registry import opcode

V311, V312 = (3, 11), (3, 12)


def _is_none(value) -> bool:
    if isinstance(value, TensorVariable):
        return False
    return value.is_constant() and value.as_constant() is None


def _pop_jump(condition):
    def handler(frame, inst):
        value = frame.pop()
        if condition(frame, value):
            frame.jump(inst)
    return handler


_if_true = _pop_jump(lambda f, v: v.truthy(f.tracer))
_if_false = _pop_jump(lambda f, v: not v.truthy(f.tracer))
_if_none = _pop_jump(lambda f, v: _is_none(v))
_if_not_none = _pop_jump(lambda f, v: not _is_none(v))

opcode("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE", versions=V311)(_if_true)
opcode("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", versions=V311)(_if_false)
opcode("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE", versions=V311)(_if_none)
opcode("POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE", versions=V311)(_if_not_none)
opcode("POP_JUMP_IF_TRUE", versions=V312)(_if_true)
opcode("POP_JUMP_IF_FALSE", versions=V312)(_if_false)
opcode("POP_JUMP_IF_NONE", versions=V312)(_if_none)
opcode("POP_JUMP_IF_NOT_NONE", versions=V312)(_if_not_none)


@opcode("JUMP_IF_TRUE_OR_POP", versions=V311)
def _jump_if_true_or_pop(frame, inst):
    if frame.peek().truthy(frame.tracer):
        frame.jump(inst)
    else:
        frame.pop()


@opcode("JUMP_IF_FALSE_OR_POP", versions=V311)
def _jump_if_false_or_pop(frame, inst):
    if not frame.peek().truthy(frame.tracer):
        frame.jump(inst)
    else:
        frame.pop()


@opcode("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP")
def _jump(frame, inst):
    frame.jump(inst)


@opcode("GET_ITER", "GET_YIELD_FROM_ITER")
def _get_iter(frame, inst):
    value = frame.pop()
    if not isinstance(value, IteratorVariable):
        value = IteratorVariable(value.iterate(frame.tracer))
    frame.push(value)


@opcode("FOR_ITER", versions=V311)
def _for_iter_311(frame, inst):
    it = frame.peek()
    if not isinstance(it, IteratorVariable):
        unsupported(f"iterating over {it}")
    item = it.next()
    if item is None:
        frame.pop()
        frame.jump(inst)
    else:
        frame.push(item)


@opcode("FOR_ITER", versions=V312)
def _for_iter_312(frame, inst):
    it = frame.peek()
    if not isinstance(it, IteratorVariable):
        unsupported(f"iterating over {it}")
    item = it.next()
    if item is None:
        # The target is END_FOR, which pops the iterator and this placeholder.
        frame.push(NULL)
        frame.jump(inst)
    else:
        frame.push(item)


@opcode("END_FOR", versions=V312)
def _end_for(frame, inst):
    frame.popn(2)


@opcode("LOAD_ASSERTION_ERROR")
def _load_assertion_error(frame, inst):
    unsupported("assertion failed in compiled code")


@opcode("RAISE_VARARGS")
def _raise_varargs(frame, inst):
    if inst.arg not in (1, 2):
        unsupported("re-raising an exception in compiled code")
    if inst.arg == 2:
        # ``raise E from cause``: the cause only decorates the traceback; captured code
        # reads nothing of a caught exception but its type and args.
        frame.pop()
    exc = frame.pop()
    if isinstance(exc, ClassVariable) and issubclass(exc.cls, BaseException):
        exc = ExceptionVariable(exc.cls, [])
    if not isinstance(exc, ExceptionVariable):
        unsupported(f"raise of {exc}")
    message = ", ".join(str(a.as_constant()) for a in exc.args if a.is_constant())
    raise RaisedInUserCode(exc.exc_type, message, exc)


@opcode("PUSH_EXC_INFO")
def _push_exc_info(frame, inst):
    exc = frame.pop()
    frame.push(NONE)  # the previously handled exception: none inside captured code
    frame.push(exc)


@opcode("CHECK_EXC_MATCH")
def _check_exc_match(frame, inst):
    from ..variables.builtins import _class_info

    expected = _class_info(frame.pop())
    exc = frame.peek()
    frame.push(ConstantVariable(issubclass(exc.exc_type, expected)))


@opcode("POP_EXCEPT")
def _pop_except(frame, inst):
    frame.pop()


@opcode("RERAISE")
def _reraise(frame, inst):
    # An `except` clause that did not match, a `finally` body run on the way out, or
    # the cleanup of an exception raised inside a handler: raise it on.
    exc = frame.pop()
    if not isinstance(exc, ExceptionVariable):
        unsupported("re-raising an exception in compiled code")
    message = ", ".join(str(a.as_constant()) for a in exc.args if a.is_constant())
    raise RaisedInUserCode(exc.exc_type, message, exc)


@opcode("WITH_EXCEPT_START", "CLEANUP_THROW", "CHECK_EG_MATCH")
def _exceptions(frame, inst):
    unsupported("an exception propagating through a `with` block or re-raised in compiled code")


def _send(frame, inst, keep_iterator: bool):
    """``yield from``: forward the next value of the inner iterator, or finish with its return value."""
    frame.pop()  # the value sent in: always None, the trace drives generators with next()
    inner = frame.peek()
    if not isinstance(inner, IteratorVariable):
        unsupported(f"yield from {inner}")
    item = inner.next()
    if item is not None:
        frame.push(item)
        return
    done = getattr(inner, "frame", None)
    result = done.return_value if done is not None and done.return_value is not None else NONE
    if not keep_iterator:
        frame.pop()
    frame.push(result)
    frame.jump(inst)


opcode("SEND", versions=V311)(lambda frame, inst: _send(frame, inst, keep_iterator=False))
opcode("SEND", versions=V312)(lambda frame, inst: _send(frame, inst, keep_iterator=True))


@opcode("END_SEND", versions=V312)
def _end_send(frame, inst):
    del frame.stack[-2]


@opcode("GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "BEFORE_ASYNC_WITH",
        "LOAD_BUILD_CLASS", "SETUP_ANNOTATIONS", "IMPORT_STAR", "PRINT_EXPR")
def _unsupported_construct(frame, inst):
    unsupported(f"{inst.opname} (this construct is not supported in compiled code)")

