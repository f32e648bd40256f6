"""Python builtins (and the ``math`` / ``operator`` modules) during capture.

One rule per builtin callable. Rules compute Python results now when their
inputs are known values, turn tensor arithmetic into graph ops, and refuse
what would read tensor data into Python (``print``, ``int(tensor)``, ...).
"""
from __future__ import annotations

import functools
import math
import operator
import sys
import types

import torch

from ...registry import rule_registrar
from ..markers import graph_break
from .base import (
    AttributeMissing, KnownCallableVariable, raise_in_user_code, unsupported,
)
from .constant import NONE, ConstantVariable
from .containers import (
    DictVariable, IteratorVariable, ListVariable, SetVariable, SliceVariable, TupleVariable, _key_of, set_from,
)
from .hashing import hash_builtin, note_order_read
from .instance_checks import isinstance_of, issubclass_of
from .iterators import EnumerateIterator, FilterIterator, MapIterator, ReversedIterator, ZipIterator, iterator_of
from ..size_node import is_symbolic
from .tensor import TensorVariable, record_op

BUILTIN_RULES: dict = {}


builtin = rule_registrar(BUILTIN_RULES)


class BuiltinVariable(KnownCallableVariable):
    def call(self, tx, args, kwargs):
        rule = BUILTIN_RULES.get(self.fn)
        if rule is None:
            unsupported(f"call to {getattr(self.fn, '__qualname__', self.fn)} (not supported in compiled code)")
        return rule(tx, *args, **kwargs)

    def getattr(self, tx, name):
        if name == "__name__":
            return ConstantVariable(self.fn.__name__)
        unsupported(f"attribute {name!r} of builtin {self.fn}")

    def getitem(self, tx, index):
        """``list[Tensor]``, ``dict[str, int]``: a type annotation, as ``typing.cast`` takes it."""
        if not isinstance(self.fn, type) or not hasattr(self.fn, "__class_getitem__"):
            unsupported(f"indexing builtin {self.fn}")
        return ConstantVariable(self.fn[annotation_value(index)])  # immutable, rebuilt as a constant

    def __repr__(self):
        return f"BuiltinVariable({getattr(self.fn, '__name__', self.fn)})"


def annotation_value(var):
    """The Python value of a type argument: a class, a constant, or a tuple of them."""
    from .objects import ClassVariable

    if isinstance(var, ClassVariable):
        return var.cls
    if isinstance(var, BuiltinVariable) and isinstance(var.fn, type):
        return var.fn
    if isinstance(var, TupleVariable):
        return tuple(annotation_value(v) for v in var.items)
    if var.is_constant():
        return var.as_constant()
    unsupported(f"{var} as a type argument")


def _all_constant(args, kwargs=None):
    return all(a.is_constant() for a in args) and all(v.is_constant() for v in (kwargs or {}).values())


def fold(fn, args, kwargs=None):
    """Apply a pure Python function to known values now."""
    try:
        result = fn(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in (kwargs or {}).items()})
    except Exception as e:  # raised into the user's code as CPython raises it, message and all
        raise_in_user_code(type(e), str(e))
    return result


# ---- values and types ---------------------------------------------------------


@builtin(len)
def _len(tx, obj):
    return ConstantVariable(obj.length(tx))


@builtin(isinstance)
def _isinstance(tx, obj, classinfo):
    return ConstantVariable(isinstance_of(tx, obj, _flat_classes(_class_info(classinfo))))


@builtin(issubclass)
def _issubclass(tx, cls, classinfo):
    return ConstantVariable(issubclass_of(tx, cls, _class_of(cls), _flat_classes(_class_info(classinfo))))


def _flat_classes(info) -> list:
    if isinstance(info, tuple):
        return [c for item in info for c in _flat_classes(item)]
    return [info]


def _class_of(var):
    from .objects import ClassVariable

    if isinstance(var, ClassVariable):
        return var.cls
    if isinstance(var, BuiltinVariable) and isinstance(var.fn, type):
        return var.fn
    if var.is_constant() and isinstance(var.as_constant(), type):
        return var.as_constant()
    unsupported(f"{var} is not a class")


def _class_info(var):
    if isinstance(var, TupleVariable):
        return tuple(_class_info(v) for v in var.items)
    return _class_of(var)


@builtin(type)
def _type(tx, obj, *rest):
    if rest:
        unsupported("type(name, bases, dict) in compiled code")
    return tx.wrap(obj.python_type(), None)


@builtin(callable)
def _callable(tx, obj):
    from .functions import FunctionVariable, UserMethodVariable
    from .objects import ClassVariable

    if isinstance(obj, (FunctionVariable, UserMethodVariable, BuiltinVariable, ClassVariable)):
        return ConstantVariable(True)
    if obj.is_constant():
        return ConstantVariable(callable(obj.as_constant()))
    return ConstantVariable(callable(getattr(obj, "obj", None)) or hasattr(obj.python_type(), "__call__"))


@builtin(getattr)
def _getattr(tx, obj, name, default=None):
    try:
        return obj.getattr(tx, name.as_constant())
    except AttributeMissing:
        if default is None:
            unsupported(f"AttributeError: {obj} has no attribute {name.as_constant()!r}")
        _guard_absent(tx, obj, name.as_constant())
        return default


@builtin(hasattr)
def _hasattr(tx, obj, name):
    try:
        obj.getattr(tx, name.as_constant())
        return ConstantVariable(True)
    except AttributeMissing:
        _guard_absent(tx, obj, name.as_constant())
        return ConstantVariable(False)


def _guard_absent(tx, obj, name):
    from .class_attributes import class_source
    from .objects import ClassVariable, NewObjectVariable

    if obj.source is not None:
        tx.guards.has_attr(obj.source, name, False)
    elif isinstance(obj, (NewObjectVariable, ClassVariable)):
        # An object built in the frame (or a class reached without a source): the class
        # decides, until it gains the attribute.
        source = class_source(obj.cls)
        if source is not None:
            tx.guards.has_attr(source, name, False)


@builtin(setattr)
def _setattr(tx, obj, name, value):
    tx.writes += 1
    obj.setattr(tx, name.as_constant(), value)
    return NONE


@builtin(delattr)
def _delattr(tx, obj, name):
    tx.writes += 1
    obj.delattr(tx, name.as_constant())
    return NONE


@builtin(object.__setattr__)
def _object_setattr(tx, obj, name, value):
    from .objects import NewObjectVariable

    if not isinstance(obj, NewObjectVariable):
        unsupported("object.__setattr__ on an object that came from the inputs")
    obj.attrs[name.as_constant()] = value
    return NONE


@builtin(graph_break)
def _graph_break(tx):
    unsupported("graph break requested (surge.graph_break())")


# torch.compile's graph_break(), in code written for torch.compile: a break as
# surge.graph_break() is. Known by module and name, and only once the user's code has
# imported it: surge never imports torch._dynamo itself (frontend/lazy_dynamo.py).
_DYNAMO_GRAPH_BREAK = ("torch._dynamo.decorators", "graph_break")


def adopt_dynamo_graph_break(value) -> bool:
    """Whether ``value`` is torch._dynamo's graph_break (given a rule on first sight)."""
    module_name, name = _DYNAMO_GRAPH_BREAK
    if not isinstance(value, types.FunctionType) or value.__module__ != module_name or value.__name__ != name:
        return False
    module = sys.modules.get(module_name)
    if module is None or getattr(module, name, None) is not value:
        return False

    def rule(tx, *args, **kwargs):
        unsupported("graph break requested (torch._dynamo.graph_break())")
    BUILTIN_RULES[value] = rule
    return True


@builtin(id)
def _id(tx, obj):
    """The id of an object read from the inputs: a constant, under a guard on that id
    (another object at the source is a recompile). Objects the trace makes have no id yet."""
    if obj.is_constant() and any(obj.as_constant() is v for v in _SINGLETONS):
        # One object per process: its id is a constant of this process, guarded so that a
        # capture stored on disk is not used with another process's id.
        value = obj.as_constant()
        ids = tx.guards.consts.ref(id, "id")
        tx.guards.add(None, f"{ids}({tx.guards.consts.ref(value, repr(value))}) == {id(value)}",
                      f"id({value!r}) == {id(value)}")
        return ConstantVariable(id(value))
    real = _real_object(obj)
    if real is _NO_OBJECT or obj.source is None:
        unsupported(f"id() of {obj}, which the trace made (its id is known only when it runs)")
    tx.guards.add(obj.source, f"id({{v}}) == {id(real)}", f"id({obj.source.name()}) == {id(real)}")
    return ConstantVariable(id(real))


_NO_OBJECT = object()
_SINGLETONS = (None, True, False, Ellipsis, NotImplemented)


def _real_object(var):
    """The Python object a value read from the inputs stands for, or _NO_OBJECT."""
    from .functions import UserFunctionVariable
    from .objects import ClassVariable, ObjectVariable, PythonModuleVariable

    if isinstance(var, TensorVariable):
        return var.real if var.real is not None else _NO_OBJECT
    if isinstance(var, ObjectVariable):
        return var.obj
    if isinstance(var, ClassVariable):
        return var.cls
    if isinstance(var, UserFunctionVariable):
        return var.fn
    if isinstance(var, PythonModuleVariable):
        return var.module
    return _NO_OBJECT


@builtin(print)
def _print(tx, *args, **kwargs):
    unsupported("print() in compiled code (output is a side effect)")


@builtin(input, open, exec, eval, breakpoint)
def _io(tx, *args, **kwargs):
    unsupported("I/O or dynamic code in compiled code")


# ---- numbers ------------------------------------------------------------------


def _number_conversion(fn):
    def rule(tx, *args, **kwargs):
        if any(isinstance(a, TensorVariable) for a in args):
            from .scalar_reads import captures_reads, read_scalar, why_reads_break

            if len(args) == 1 and not kwargs and fn in (int, float) and captures_reads(tx):
                read = read_scalar(tx, args[0], torch.int64 if fn is int else torch.float64)
                if read is not None:
                    return read
            unsupported(f"{fn.__name__}() of a tensor reads its data into Python{why_reads_break(tx)}")
        if len(args) == 1 and not kwargs and isinstance(args[0], ConstantVariable):
            value = args[0].symbolic_value()
            # int() of a symbolic int, float() of a symbolic number: still symbolic, no guard.
            if isinstance(value, torch.SymInt) and is_symbolic(value) and fn in (int, float):
                return ConstantVariable(value if fn is int else torch.sym_float(value))
            if isinstance(value, torch.SymFloat) and is_symbolic(value):
                return ConstantVariable(value if fn is float else math.trunc(value))  # int() truncates
        if not args and not kwargs:
            return ConstantVariable(fn())
        return ConstantVariable(fold(fn, args, kwargs))
    return rule


for _fn in (int, float, complex):
    BUILTIN_RULES[_fn] = _number_conversion(_fn)


@builtin(sys.exc_info)
def _exc_info(tx):
    from .exceptions import exc_info

    return exc_info(tx)


if sys.version_info >= (3, 11):
    @builtin(sys.exception)
    def _exception(tx):
        from .exceptions import handled_exception

        return handled_exception(tx)


@builtin(bool)
def _bool(tx, obj=None):
    return ConstantVariable(False if obj is None else obj.truthy(tx))


def _string_conversion(fn):
    def rule(tx, *args, **kwargs):
        if fn is hash and len(args) == 1 and not kwargs:
            hashed = hash_builtin(tx, args[0])  # a class's own __hash__, traced
            if hashed is not None:
                return hashed
            if args[0].is_constant():
                note_order_read([args[0].as_constant(), None])  # a string's hash is this process's
        if fn in (str, repr) and len(args) == 1 and not kwargs and hasattr(args[0], "str_or_repr"):
            return args[0].str_or_repr(tx, fn)  # exceptions, dict views
        if fn in (str, repr) and len(args) == 1 and not kwargs and _plain_class(args[0]):
            # "<class 'mod.Name'>": fixed by the class's identity and its metaclass being type.
            return ConstantVariable(fn(args[0].cls))
        if not _all_constant(args, kwargs):
            unsupported(f"{fn.__name__}() of {args[0] if args else ''} in compiled code")
        return ConstantVariable(fold(fn, args, kwargs))
    return rule


def _plain_class(var) -> bool:
    from .objects import ClassVariable

    return isinstance(var, ClassVariable) and type(var.cls).__repr__ is type.__repr__


for _fn in (str, repr, format, ascii, hash, chr, ord, bin, hex, oct, round, divmod):
    BUILTIN_RULES[_fn] = _string_conversion(_fn)


@builtin(abs)
def _abs(tx, x):
    if isinstance(x, TensorVariable):
        return record_op(tx, "call_function", torch.abs, [x], {})
    return ConstantVariable(fold(abs, [x]))


@builtin(pow)
def _pow(tx, a, b, mod=None):
    from ..interpreter.operators import binary_op

    if mod is not None:
        return ConstantVariable(fold(pow, [a, b, mod]))
    return binary_op(tx, operator.pow, a, b)


def _extreme(fn, op):
    def rule(tx, *args, key=None, default=None):
        from ..interpreter.operators import binary_op

        if key is not None:
            unsupported(f"{fn.__name__}(key=...) in compiled code")
        items = args[0].iterate(tx) if len(args) == 1 else list(args)
        if not items:
            if default is None:
                unsupported(f"{fn.__name__}() of an empty sequence")
            return default
        if all(i.is_constant() for i in items):
            symbolic = _symbolic_extreme(fn, items)
            if symbolic is not None:
                return symbolic
            return ConstantVariable(fn(i.as_constant() for i in items))
        if any(isinstance(i, TensorVariable) for i in items):
            return _extreme_of_tensors(tx, fn, op, items)
        best = items[0]
        for item in items[1:]:
            if binary_op(tx, op, item, best).truthy(tx):
                best = item
        return best
    return rule


def _symbolic_extreme(fn, items: list):
    """``min(step, 4)`` of symbolic numbers of one kind (all ints or all floats): a symbolic
    min/max, not a guard on which is smaller (which would recompile for each value)."""
    values = [i.symbolic_value() if isinstance(i, ConstantVariable) else None for i in items]
    if not any(is_symbolic(v) for v in values):
        return None
    kinds = {int if isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) else
             float if isinstance(v, (float, torch.SymFloat)) else None for v in values}
    if len(kinds) != 1 or None in kinds:
        return None
    combine = torch.sym_min if fn is min else torch.sym_max
    best = values[0]
    for v in values[1:]:
        best = combine(best, v)
    return ConstantVariable(best)


def _extreme_of_tensors(tx, fn, op, items: list):
    """``max(a, b, ...)`` of one-element tensors: Python keeps the first item unless a later
    one compares greater (``bool(item > best)``); ``torch.where`` on that comparison picks
    the same values (ties and NaNs included) and routes gradients to the chosen item."""
    from ..interpreter.operators import binary_op

    if not all(isinstance(i, TensorVariable) for i in items):
        unsupported(f"{fn.__name__}() of a tensor and a Python value (the result's type depends on the data)")
    first = items[0].example
    shape = tuple(first.shape)
    if not all(type(d) is int for d in shape) or any(tuple(i.example.shape) != shape or i.example.dtype != first.dtype
                                                     for i in items):
        unsupported(f"{fn.__name__}() of tensors of different shapes or dtypes")
    if first.numel() != 1:
        raise_in_user_code(RuntimeError, "Boolean value of Tensor with more than one value is ambiguous")
    best = items[0]
    for item in items[1:]:
        best = record_op(tx, "call_function", torch.where, [binary_op(tx, op, item, best), item, best], {})
    return best


BUILTIN_RULES[min] = _extreme(min, operator.lt)
BUILTIN_RULES[max] = _extreme(max, operator.gt)


@builtin(sum)
def _sum(tx, iterable, start=None):
    from ..interpreter.operators import binary_op

    total = start if start is not None else ConstantVariable(0)
    for item in iterable.iterate(tx):
        total = binary_op(tx, operator.add, total, item)
    return total


def _short_circuit(stop_at: bool):
    """``any``/``all``: items taken one at a time, and no more once one decides (a generator's
    later items, and their side effects, are never made, as in CPython)."""
    def rule(tx, iterable):
        iterator = iterator_of(tx, iterable)
        while (item := iterator.next()) is not None:
            if item.truthy(tx) is stop_at:
                return ConstantVariable(stop_at)
        return ConstantVariable(not stop_at)
    return rule


BUILTIN_RULES[any] = _short_circuit(True)
BUILTIN_RULES[all] = _short_circuit(False)


# ---- containers and iteration ---------------------------------------------------


@builtin(tuple)
def _tuple(tx, iterable=None):
    return TupleVariable([] if iterable is None else iterable.iterate(tx))


@builtin(tuple.__new__)
def _tuple_new(tx, cls, iterable=None):
    # namedtuple._make / _replace build their result with tuple.__new__(cls, values).
    klass = _class_of(cls)
    items = [] if iterable is None else iterable.iterate(tx)
    return TupleVariable(items, cls=None if klass is tuple else klass)


@builtin(list)
def _list(tx, iterable=None):
    return ListVariable([] if iterable is None else iterable.iterate(tx))


def _set_rule(frozen):
    def rule(tx, iterable=None):
        if frozen and iterable is not None and iterable.python_type() is frozenset \
                and (isinstance(iterable, SetVariable) or iterable.is_constant()):
            return iterable  # frozenset(f) of a frozenset is f itself, as in CPython
        if iterable is None:
            return SetVariable({}, frozen=frozen)
        return set_from(tx, iterable, frozen)
    return rule


BUILTIN_RULES[set] = _set_rule(False)
BUILTIN_RULES[frozenset] = _set_rule(True)


@builtin(dict)
def _dict(tx, other=None, **kwargs):
    items = {}
    if isinstance(other, DictVariable):
        items.update(other.items)
    elif other is not None:
        for pair in other.iterate(tx):
            k, v = pair.iterate(tx)
            items[_key_of(tx, k)] = v
    items.update(kwargs)
    return DictVariable(items)


@builtin(range)
def _range(tx, *args):
    return ConstantVariable(fold(range, args))


@builtin(slice)
def _slice(tx, *args):
    parts = list(args) + [NONE] * (3 - len(args)) if len(args) > 1 else [NONE, args[0], NONE]
    return SliceVariable(*parts)


@builtin(iter)
def _iter(tx, obj):
    return iterator_of(tx, obj)


@builtin(next)
def _next(tx, it, default=None):
    if not isinstance(it, IteratorVariable):
        unsupported(f"next() on {it}")
    value = it.next()
    if value is None:
        if default is None:
            stop_iteration(it)
        return default
    return value


def stop_iteration(it):
    """The StopIteration of an iterator that ran out; a finished generator's carries its
    return value (``StopIteration.value``)."""
    from .exceptions import ExceptionVariable
    from .base import RaisedInUserCode

    result = it.frame.return_value if getattr(it, "just_finished", False) else None
    if result is None or result.is_constant() and result.as_constant() is None:
        raise_in_user_code(StopIteration)
    raise RaisedInUserCode(StopIteration, "", ExceptionVariable(StopIteration, [result]))


@builtin(zip)
def _zip(tx, *iterables, strict=None):
    return ZipIterator(tx, [iterator_of(tx, i) for i in iterables], strict is not None and strict.truthy(tx))


@builtin(enumerate)
def _enumerate(tx, iterable, start=None):
    return EnumerateIterator(tx, iterator_of(tx, iterable), 0 if start is None else start.as_constant())


@builtin(reversed)
def _reversed(tx, seq):
    if isinstance(seq, (ListVariable, TupleVariable)) and seq.python_type() in (list, tuple):
        return ReversedIterator(tx, seq)
    kind = type(reversed(seq.as_constant())) if seq.is_constant() else None  # a range's is a range_iterator
    return IteratorVariable(list(reversed(seq.iterate(tx))), kind=kind)


@builtin(sorted)
def _sorted(tx, iterable, key=None, reverse=None):
    items = iterable.iterate(tx)
    rev = bool(reverse.as_constant()) if reverse is not None else False
    if key is None:
        if not all(i.is_constant() for i in items):
            unsupported("sorted() of non-constant values")
        return ListVariable([ConstantVariable(v) for v in sorted((i.as_constant() for i in items), reverse=rev)])
    keyed = [(key.call(tx, [i], {}).as_constant(), i) for i in items]
    # By the keys alone: Python's sort is stable, also reversed (equal keys keep their order).
    keyed.sort(key=lambda t: t[0], reverse=rev)
    return ListVariable([i for _, i in keyed])


@builtin(map)
def _map(tx, fn, *iterables):
    return MapIterator(tx, fn, [iterator_of(tx, i) for i in iterables])


@builtin(filter)
def _filter(tx, fn, iterable):
    no_function = fn.is_constant() and fn.as_constant() is None
    return FilterIterator(tx, None if no_function else fn, iterator_of(tx, iterable))


@builtin(functools.reduce)
def _reduce(tx, fn, iterable, initial=None):
    items = iterable.iterate(tx)
    acc = initial if initial is not None else items.pop(0)
    for item in items:
        acc = fn.call(tx, [acc, item], {})
    return acc


@builtin(super)
def _super(tx, *args):
    from .objects import SuperVariable

    if args:
        return SuperVariable(_class_of(args[0]), args[1])
    frame = tx.current_frame
    if "__class__" not in frame.cells:
        unsupported("super() outside a method")
    cls_var = frame.cells["__class__"].load(tx)
    first = frame.code.co_varnames[0]
    return SuperVariable(_class_of(cls_var), frame.load_local(first))


# ---- math and operator: pure functions of numbers --------------------------------


# math.floor(v) of a symbolic v calls its __floor__: a symbolic int (shape_env.py).
_ROUNDING = {math.floor: math.floor, math.ceil: math.ceil, math.trunc: math.trunc}


def _pure_math(fn):
    def rule(tx, *args, **kwargs):
        if any(isinstance(a, TensorVariable) for a in args):
            unsupported(f"math.{fn.__name__}() of a tensor reads its data into Python")
        symbolic_form = getattr(torch, f"_sym_{fn.__name__}", None) or _ROUNDING.get(fn)
        if symbolic_form is not None and len(args) == 1 and not kwargs and isinstance(args[0], ConstantVariable) \
                and is_symbolic(args[0].symbolic_value()):
            return ConstantVariable(symbolic_form(args[0].symbolic_value()))  # stays symbolic, no guard
        return ConstantVariable(fold(fn, args, kwargs))
    return rule


for _name in dir(math):
    _fn = getattr(math, _name)
    if callable(_fn):
        BUILTIN_RULES[_fn] = _pure_math(_fn)


def _operator_rule(fn):
    def rule(tx, *args):
        from ..interpreter.operators import apply_operator

        return apply_operator(tx, fn, list(args))
    return rule


for _name in dir(operator):
    _fn = getattr(operator, _name)
    if callable(_fn) and not _name.startswith("_") and not isinstance(_fn, type):
        BUILTIN_RULES[_fn] = _operator_rule(_fn)

