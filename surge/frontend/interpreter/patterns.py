"""Handlers for ``match`` statements: structural tests decided on Python values, with
CPython's rules (ceval's ``MATCH_*`` opcodes): mapping and sequence patterns test the
subject's type flags (a ``collections.abc`` registration sets them), a mapping pattern
reads each key with the subject's own ``get(key, default)`` and refuses a key given
twice, a class pattern checks ``isinstance`` and ``__match_args__`` (a tuple of strings)
and refuses an attribute matched twice."""
from __future__ import annotations

from ..variables.base import AttributeMissing, raise_in_user_code, unsupported
from ..variables.builtins import BUILTIN_RULES, _class_of
from ..variables.constant import NONE, ConstantVariable
from ..variables.containers import DictVariable, TupleVariable, _key_of
from ..variables.instance_checks import isinstance_of
from ..variables.objects import NewObjectVariable
from ..variables.tensor import TensorVariable
from .registry import opcode

# CPython's type flags (Include/object.h).
_TPFLAGS_SEQUENCE = 1 << 5
_TPFLAGS_MAPPING = 1 << 6
_TPFLAGS_MATCH_SELF = 1 << 22
# Dict classes whose ``get`` is dict's own: their entries are read directly.
_PLAIN_GET = (dict.get,)


def _has_flag(subject, flag: int) -> bool:
    if isinstance(subject, TensorVariable):
        unsupported("matching a tensor against a sequence or mapping pattern")
    return bool(subject.python_type().__flags__ & flag)


@opcode("MATCH_MAPPING")
def _match_mapping(frame, inst):
    frame.push(ConstantVariable(_has_flag(frame.peek(), _TPFLAGS_MAPPING)))


@opcode("MATCH_SEQUENCE")
def _match_sequence(frame, inst):
    frame.push(ConstantVariable(_has_flag(frame.peek(), _TPFLAGS_SEQUENCE)))


@opcode("GET_LEN")
def _get_len(frame, inst):
    frame.push(ConstantVariable(frame.peek().length(frame.tracer)))


@opcode("MATCH_KEYS")
def _match_keys(frame, inst):
    keys = frame.peek().iterate(frame.tracer)
    subject = frame.peek(2)
    tx = frame.tracer
    direct = isinstance(subject, DictVariable) and getattr(subject.python_type(), "get", None) in _PLAIN_GET
    get = None if direct else subject.getattr(tx, "get")
    seen: set = set()
    values = []
    for key in keys:
        k = _key_of(tx, key)
        if k in seen:
            raise_in_user_code(ValueError, f"mapping pattern checks duplicate key ({_repr(key)})")
        seen.add(k)
        if direct:  # (a defaultdict's factory never runs: CPython calls get, not [])
            value = subject.items.get(k)
        else:
            missing = NewObjectVariable(object)
            value = get.call(tx, [key, missing], {})
            value = None if value is missing else value
        if value is None:
            frame.push(NONE)
            return
        values.append(value)
    frame.push(TupleVariable(values))


def _repr(key) -> str:
    return repr(key.as_constant()) if key.is_constant() else f"<{key.python_type().__qualname__} object>"


@opcode("COPY_DICT_WITHOUT_KEYS")
def _copy_dict_without_keys(frame, inst):
    tx = frame.tracer
    keys = frame.pop().iterate(tx)
    subject = frame.peek()
    rest = subject if isinstance(subject, DictVariable) else BUILTIN_RULES[dict](tx, subject)  # dict(subject)
    drop = {_key_of(tx, k) for k in keys}
    frame.push(DictVariable({k: v for k, v in rest.items.items() if k not in drop}))


@opcode("MATCH_CLASS")
def _match_class(frame, inst):
    names = frame.pop().as_constant()
    cls_var = frame.pop()
    cls = _class_of(cls_var)
    subject = frame.pop()
    tx = frame.tracer
    if not isinstance_of(tx, subject, [cls]):
        frame.push(NONE)
        return
    attributes = list(names)
    values = []
    if inst.arg:
        if hasattr(cls, "__match_args__"):
            match_args = cls_var.getattr(tx, "__match_args__")  # read (and guarded) as any class attribute
            if match_args.python_type() is not tuple:
                raise_in_user_code(TypeError, f"{cls.__name__}.__match_args__ must be a tuple "
                                              f"(got {match_args.python_type().__name__})")
            positional = match_args.iterate(tx)
        elif cls.__flags__ & _TPFLAGS_MATCH_SELF:  # bool(x), int(x), str(x), ...: the subject itself
            positional = None
        else:
            positional = []
        allowed = 1 if positional is None else len(positional)
        if allowed < inst.arg:
            raise_in_user_code(TypeError, f"{cls.__name__}() accepts {allowed} positional sub-pattern"
                                          f"{'' if allowed == 1 else 's'} ({inst.arg} given)")
        if positional is None:
            values.append(subject)
        else:
            attributes = positional[:inst.arg] + attributes
    seen: set = set()
    for name in attributes:
        if not isinstance(name, str):  # a __match_args__ entry (checked as it is reached)
            if not (name.is_constant() and type(name.as_constant()) is str):
                raise_in_user_code(TypeError, f"__match_args__ elements must be strings "
                                              f"(got {name.python_type().__name__})")
            name = name.as_constant()
        if name in seen:
            raise_in_user_code(TypeError, f"{cls.__name__}() got multiple sub-patterns for attribute {name!r}")
        seen.add(name)
        try:
            values.append(subject.getattr(tx, name))
        except AttributeMissing:
            frame.push(NONE)
            return
    frame.push(TupleVariable(values))
