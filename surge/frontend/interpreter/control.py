"""Handlers for jumps, loops, iteration and raising.

Branches are decided now, on Python values the guards fix; a branch on a
tensor's value is data-dependent and cannot be captured. Loops are unrolled.
"""
from __future__ import annotations

from ..variables.base import NULL, RaisedInUserCode, unsupported
from ..variables.constant import NONE, ConstantVariable
from ..variables.objects import ClassVariable, ExceptionVariable
from ..variables.containers import IteratorVariable
from ..variables.exceptions import TracebackVariable
from ..variables.iterators import ResumedLoopIterator, iterator_of
from ...errors import Unsupported
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
    frame.push(iterator_of(frame.tracer, frame.pop()))


def _split_at_resumed_loop(frame, it) -> None:
    """A resume function that continued inside a loop reaches that loop's next iteration
    (its iterator still unread, ``ResumedLoopIterator``): the frame splits here. Break
    code runs this FOR_ITER in CPython and calls the resume function at the body's start
    with the next item, or the one after the loop: one set of entries serves every
    iteration instead of one unrolled rest of the loop per position."""
    if isinstance(it, ResumedLoopIterator) and it.unread() and frame.parent is None:
        error = Unsupported("the next iteration of a loop resumed after a graph break (CPython "
                            "advances the iterator; every iteration runs the same resume functions)")
        error.loop_back_edge = True
        raise error


@opcode("FOR_ITER", versions=V311)
def _for_iter_311(frame, inst):
    it = frame.peek()
    _split_at_resumed_loop(frame, it)
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
    _split_at_resumed_loop(frame, it)
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
    handled = frame.tracer.handled_exceptions
    if inst.arg == 0:
        # A bare ``raise``: the exception being handled, unchanged.
        if not handled or not isinstance(handled[-1], ExceptionVariable):
            unsupported("re-raising an exception the compiled code did not catch")
        _raise(handled[-1])
    cause = frame.pop() if inst.arg == 2 else None
    exc = _instance(frame.pop())
    if cause is not None:
        exc.set_cause(cause if _is_none(cause) else _instance(cause))
    exc.raised_while_handling(handled[-1] if handled else None)
    _raise(exc)


def _instance(exc):
    """``raise E`` with a class raises ``E()``."""
    if isinstance(exc, ClassVariable) and issubclass(exc.cls, BaseException):
        exc = ExceptionVariable(exc.cls, [])
    if not isinstance(exc, ExceptionVariable):
        unsupported(f"raise of {exc}")
    return exc


def _raise(exc):
    message = ", ".join(str(a.as_constant()) for a in exc.args if a.is_constant())
    raise RaisedInUserCode(exc.exc_type, message, exc)


@opcode("PUSH_EXC_INFO")
def _push_exc_info(frame, inst):
    # CPython's exc_info: the handler runs with this exception as the one being handled
    # (what a bare ``raise`` re-raises and a new exception's ``__context__``); the stack
    # keeps the previous one, which POP_EXCEPT restores.
    exc = frame.pop()
    handled = frame.tracer.handled_exceptions
    frame.push(handled[-1] if handled else NONE)
    frame.push(exc)
    handled.append(exc)
    frame.handler_raises.append(frame.raised_at)


@opcode("CHECK_EXC_MATCH")
def _check_exc_match(frame, inst):
    from ..variables.builtins import _class_info

    expected = _class_info(frame.pop())
    exc = frame.peek()
    frame.push(ConstantVariable(issubclass(exc.exc_type, expected)))


@opcode("POP_EXCEPT")
def _pop_except(frame, inst):
    frame.pop()
    # A resume function may start inside a handler whose PUSH_EXC_INFO ran before the
    # break (then neither list has its entry).
    if frame.handler_raises:
        frame.handler_raises.pop()
        frame.tracer.handled_exceptions.pop()


@opcode("RERAISE")
def _reraise(frame, inst):
    # An `except` clause that did not match, a `finally` body run on the way out, or
    # the cleanup of an exception raised inside a handler: raise it on.
    exc = frame.pop()
    if not isinstance(exc, ExceptionVariable):
        unsupported("re-raising an exception in compiled code")
    _raise(exc)


@opcode("WITH_EXCEPT_START")
def _with_except_start(frame, inst):
    # The stack (3.11 and 3.12): ..., the block's bound __exit__, lasti, the exception
    # handled before, the exception leaving the block. __exit__ gets (type, value,
    # traceback); a true result swallows the exception.
    exc = frame.peek()
    if not isinstance(exc, ExceptionVariable):
        unsupported("an exception the trace cannot follow leaving a `with` block")
    exit_fn = frame.peek(4)
    frame.push(exit_fn.call(frame.tracer, [ClassVariable(exc.exc_type), exc, TracebackVariable()], {}))


@opcode("CLEANUP_THROW", "CHECK_EG_MATCH")
def _exceptions(frame, inst):
    unsupported("an exception thrown into a `yield from` or an `except*` in compiled code")


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

