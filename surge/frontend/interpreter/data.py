"""Handlers for operators, subscripts, attribute stores, and building/unpacking values."""
from __future__ import annotations

import dis
import operator

from ..variables.base import unsupported
from ..variables.constant import ConstantVariable
from ..variables.exceptions import ExceptionVariable
from ..variables.containers import (
    DictVariable, ListVariable, SetVariable, SliceVariable, TupleVariable, _key_of,
)
from ..variables.tensor import TensorVariable
from . import operators
from .registry import opcode

BINARY_OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift,
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "@=": operator.imatmul,
    "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor, "<<=": operator.ilshift,
    ">>=": operator.irshift,
}
BINARY_OP_BY_ARG = {i: BINARY_OPERATORS[symbol] for i, (_, symbol) in enumerate(dis._nb_ops)}

COMPARE_OPERATORS = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}


@opcode("BINARY_OP")
def _binary_op(frame, inst):
    b = frame.pop()
    a = frame.pop()
    frame.push(operators.binary_op(frame.tracer, BINARY_OP_BY_ARG[inst.arg], a, b))


@opcode("COMPARE_OP")
def _compare_op(frame, inst):
    b = frame.pop()
    a = frame.pop()
    frame.push(operators.binary_op(frame.tracer, COMPARE_OPERATORS[inst.argval], a, b))


@opcode("IS_OP")
def _is_op(frame, inst):
    b = frame.pop()
    a = frame.pop()
    same = operators.is_same(a, b, frame.tracer)
    frame.push(ConstantVariable(same != bool(inst.arg)))


@opcode("CONTAINS_OP")
def _contains_op(frame, inst):
    container = frame.pop()
    item = frame.pop()
    found = operators.contains(frame.tracer, container, item)
    frame.push(ConstantVariable(found != bool(inst.arg)))


def _unary(fn):
    def handler(frame, inst):
        frame.push(operators.unary_op(frame.tracer, fn, frame.pop()))
    return handler


opcode("UNARY_NEGATIVE")(_unary(operator.neg))
opcode("UNARY_NOT")(_unary(operator.not_))
opcode("UNARY_INVERT")(_unary(operator.invert))
opcode("UNARY_POSITIVE", versions=(3, 11))(_unary(operator.pos))

# CALL_INTRINSIC_1 operands (Python 3.12) that can occur in traced code.
_INTRINSIC_STOPITERATION_ERROR, _INTRINSIC_UNARY_POSITIVE, _INTRINSIC_LIST_TO_TUPLE = 3, 5, 6


@opcode("CALL_INTRINSIC_1", versions=(3, 12))
def _call_intrinsic_1(frame, inst):
    if inst.arg == _INTRINSIC_UNARY_POSITIVE:
        frame.push(operators.unary_op(frame.tracer, operator.pos, frame.pop()))
    elif inst.arg == _INTRINSIC_LIST_TO_TUPLE:
        frame.push(TupleVariable(frame.pop().items))
    elif inst.arg == _INTRINSIC_STOPITERATION_ERROR:
        frame.push(_stop_iteration_error(frame.pop()))
    else:
        unsupported(f"CALL_INTRINSIC_1 {inst.argrepr if hasattr(inst, 'argrepr') else inst.arg}")


def _stop_iteration_error(exc):
    """What a generator's own handler makes of an exception leaving its body (PEP 479): a
    StopIteration becomes RuntimeError("generator raised StopIteration"), caused by it."""
    if not (isinstance(exc, ExceptionVariable) and issubclass(exc.exc_type, StopIteration)):
        return exc
    error = ExceptionVariable(RuntimeError, [ConstantVariable("generator raised StopIteration")])
    error.cause = error.context = exc
    error.suppress_context = True
    return error


@opcode("BINARY_SUBSCR")
def _binary_subscr(frame, inst):
    index = frame.pop()
    obj = frame.pop()
    frame.push(operators.getitem(frame.tracer, obj, index))


@opcode("STORE_SUBSCR")
def _store_subscr(frame, inst):
    index = frame.pop()
    obj = frame.pop()
    value = frame.pop()
    operators.setitem(frame.tracer, obj, index, value)


@opcode("DELETE_SUBSCR")
def _delete_subscr(frame, inst):
    index = frame.pop()
    obj = frame.pop()
    operators.delitem(frame.tracer, obj, index)


def _make_slice(start, stop, step=None):
    step = step if step is not None else ConstantVariable(None)
    if start.is_constant() and stop.is_constant() and step.is_constant():
        # Symbolic bounds stay symbolic (``x[:, :t]`` of a dynamic length); what indexes a
        # Python sequence with the slice specializes them then.
        parts = [p.symbolic_value() if isinstance(p, ConstantVariable) else p.as_constant()
                 for p in (start, stop, step)]
        return ConstantVariable(slice(*parts))
    return SliceVariable(start, stop, step)


@opcode("BINARY_SLICE", versions=(3, 12))
def _binary_slice(frame, inst):
    stop = frame.pop()
    start = frame.pop()
    obj = frame.pop()
    frame.push(operators.getitem(frame.tracer, obj, _make_slice(start, stop)))


@opcode("STORE_SLICE", versions=(3, 12))
def _store_slice(frame, inst):
    stop = frame.pop()
    start = frame.pop()
    obj = frame.pop()
    value = frame.pop()
    operators.setitem(frame.tracer, obj, _make_slice(start, stop), value)


@opcode("BUILD_SLICE")
def _build_slice(frame, inst):
    parts = frame.popn(inst.arg)
    frame.push(_make_slice(*parts))


@opcode("STORE_ATTR")
def _store_attr(frame, inst):
    obj = frame.pop()
    value = frame.pop()
    obj.setattr(frame.tracer, inst.argval, value)


@opcode("DELETE_ATTR")
def _delete_attr(frame, inst):
    frame.pop().delattr(frame.tracer, inst.argval)


@opcode("BUILD_TUPLE")
def _build_tuple(frame, inst):
    frame.push(TupleVariable(frame.popn(inst.arg)))


@opcode("BUILD_LIST")
def _build_list(frame, inst):
    frame.push(ListVariable(frame.popn(inst.arg)))


@opcode("BUILD_SET")
def _build_set(frame, inst):
    items = frame.popn(inst.arg)
    s = SetVariable({})
    for item in items:
        s.add(frame.tracer, item)
    frame.push(s)


@opcode("BUILD_MAP")
def _build_map(frame, inst):
    flat = frame.popn(2 * inst.arg)
    tx = frame.tracer
    frame.push(DictVariable({_key_of(tx, flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}))


@opcode("BUILD_CONST_KEY_MAP")
def _build_const_key_map(frame, inst):
    keys = frame.pop().as_constant()
    values = frame.popn(inst.arg)
    frame.push(DictVariable(dict(zip(keys, values))))


def _mutating(frame, target) -> None:
    """A list/dict a comprehension builds is new, except in a resume function that
    continues the comprehension: there it is an input, and its mutations are replayed."""
    if target.source is not None:
        target.check_mutable(frame.tracer)


@opcode("LIST_APPEND")
def _list_append(frame, inst):
    value = frame.pop()
    target = frame.peek(inst.arg)
    _mutating(frame, target)
    target.items.append(value)


@opcode("SET_ADD")
def _set_add(frame, inst):
    value = frame.pop()
    frame.peek(inst.arg).add(frame.tracer, value)


@opcode("MAP_ADD")
def _map_add(frame, inst):
    value = frame.pop()
    key = frame.pop()
    target = frame.peek(inst.arg)
    _mutating(frame, target)
    target.items[_key_of(frame.tracer, key)] = value


@opcode("LIST_EXTEND")
def _list_extend(frame, inst):
    values = frame.pop()
    target = frame.peek(inst.arg)
    _mutating(frame, target)
    target.items.extend(values.iterate(frame.tracer))


@opcode("SET_UPDATE")
def _set_update(frame, inst):
    values = frame.pop()
    target = frame.peek(inst.arg)
    for v in values.iterate(frame.tracer):
        target.add(frame.tracer, v)


@opcode("DICT_UPDATE", "DICT_MERGE")
def _dict_update(frame, inst):
    other = frame.pop()
    if not isinstance(other, DictVariable):
        unsupported(f"** of {other}")
    target = frame.peek(inst.arg)
    _mutating(frame, target)
    if inst.opname == "DICT_MERGE":
        dup = set(target.items) & set(other.items)
        if dup:
            unsupported(f"got multiple values for keyword argument {next(iter(dup))!r}")
    target.items.update(other.items)


@opcode("LIST_TO_TUPLE", versions=(3, 11))
def _list_to_tuple(frame, inst):
    frame.push(TupleVariable(frame.pop().items))


@opcode("UNPACK_SEQUENCE")
def _unpack_sequence(frame, inst):
    items = frame.pop().iterate(frame.tracer)
    if len(items) != inst.arg:
        unsupported(f"cannot unpack {len(items)} values into {inst.arg}")
    for item in reversed(items):
        frame.push(item)


@opcode("UNPACK_EX")
def _unpack_ex(frame, inst):
    before, after = inst.arg & 0xFF, inst.arg >> 8
    items = frame.pop().iterate(frame.tracer)
    if len(items) < before + after:
        unsupported(f"not enough values to unpack (expected at least {before + after}, got {len(items)})")
    middle = ListVariable(items[before:len(items) - after])
    for item in reversed(items[len(items) - after:]):
        frame.push(item)
    frame.push(middle)
    for item in reversed(items[:before]):
        frame.push(item)


_CONVERSIONS = {0: None, 1: str, 2: repr, 3: ascii}


@opcode("FORMAT_VALUE")
def _format_value(frame, inst):
    spec = frame.pop().as_constant() if inst.arg & 0x04 else ""
    value = frame.pop()
    if isinstance(value, TensorVariable):
        unsupported("formatting a tensor into a string reads its data")
    if not value.is_constant():
        unsupported(f"formatting {value} into a string")
    v = value.as_constant()
    conversion = _CONVERSIONS[inst.arg & 0x03]
    if conversion is not None:
        v = conversion(v)
    frame.push(ConstantVariable(format(v, spec)))


@opcode("BUILD_STRING")
def _build_string(frame, inst):
    parts = frame.popn(inst.arg)
    frame.push(ConstantVariable("".join(p.as_constant() for p in parts)))

