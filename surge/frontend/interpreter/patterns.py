"""Handlers for ``match`` statements: structural tests decided on Python values."""
from __future__ import annotations

import collections.abc

from ..variables.base import AttributeMissing, unsupported
from ..variables.builtins import _class_of
from ..variables.constant import NONE, ConstantVariable
from ..variables.containers import DictVariable, TupleVariable, _key_of
from ..variables.tensor import TensorVariable
from .registry import opcode

_NOT_SEQUENCES = (str, bytes, bytearray)


@opcode("MATCH_MAPPING")
def _match_mapping(frame, inst):
    subject = frame.peek()
    frame.push(ConstantVariable(isinstance(subject, DictVariable)))


@opcode("MATCH_SEQUENCE")
def _match_sequence(frame, inst):
    subject = frame.peek()
    if isinstance(subject, TensorVariable):
        unsupported("matching a tensor against a sequence pattern")
    cls = subject.python_type()
    frame.push(ConstantVariable(issubclass(cls, collections.abc.Sequence) and not issubclass(cls, _NOT_SEQUENCES)))


@opcode("GET_LEN")
def _get_len(frame, inst):
    frame.push(ConstantVariable(frame.peek().length(frame.tracer)))


@opcode("MATCH_KEYS")
def _match_keys(frame, inst):
    keys = frame.peek().iterate(frame.tracer)
    subject = frame.peek(2)
    tx = frame.tracer
    wanted = [_key_of(tx, k) for k in keys]
    if all(k in subject.items for k in wanted):
        frame.push(TupleVariable([subject.items[k] for k in wanted]))
    else:
        frame.push(NONE)


@opcode("COPY_DICT_WITHOUT_KEYS")
def _copy_dict_without_keys(frame, inst):
    keys = frame.pop().iterate(frame.tracer)
    subject = frame.peek()
    drop = {_key_of(frame.tracer, k) for k in keys}
    frame.push(DictVariable({k: v for k, v in subject.items.items() if k not in drop}))


@opcode("MATCH_CLASS")
def _match_class(frame, inst):
    names = frame.pop().as_constant()
    cls = _class_of(frame.pop())
    subject = frame.pop()
    tx = frame.tracer
    if not issubclass(subject.python_type(), cls):
        frame.push(NONE)
        return
    positional = []
    if inst.arg:
        match_args = getattr(cls, "__match_args__", ())
        if inst.arg > len(match_args):
            unsupported(f"{cls.__qualname__}() accepts {len(match_args)} positional sub-patterns")
        positional = list(match_args[:inst.arg])
    values = []
    for name in positional + list(names):
        try:
            values.append(subject.getattr(tx, name))
        except AttributeMissing:
            frame.push(NONE)
            return
    frame.push(TupleVariable(values))
