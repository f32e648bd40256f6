"""Python operators over symbolic values: tensors record graph ops, known values
compute now, containers and objects follow Python's rules."""
from __future__ import annotations

import collections
import operator
import types

import torch

from ...errors import Unsupported
from ..variables.base import Variable, raise_in_user_code, unsupported
from ..variables.constant import ConstantVariable
from ..variables.dict_views import DictViewVariable, as_set_operand, set_of_iterable, view_equal
from ..variables.mapping_proxies import MappingProxyVariable
from ..variables.containers import (
    _ABSENT, BaseSequenceVariable, DictVariable, ListVariable, SetEntries, SetVariable, TupleVariable, _key_of,
    set_operation,
)
from ..variables.functions import ContainerMethodVariable, UserFunctionVariable, UserMethodVariable
from ..variables.objects import NewObjectVariable, ObjectVariable, UserObjectVariable, call_python_dunder
from .python_operators import is_user_object, user_binary_op, user_inplace_op, user_unary_op
from ..variables.tensor import TensorVariable, record_op

INPLACE_TO_BINARY = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
    operator.ipow: operator.pow, operator.imatmul: operator.matmul, operator.iand: operator.and_,
    operator.ior: operator.or_, operator.ixor: operator.xor, operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift,
}

UNARY = {operator.neg, operator.pos, operator.invert, operator.not_, operator.abs, operator.index, operator.truth}


def apply_operator(tx, fn, args: list) -> Variable:
    """Entry for operator-module functions called directly (operator.add(a, b), ...)."""
    if fn in UNARY:
        return unary_op(tx, fn, args[0])
    if fn is operator.getitem:
        return getitem(tx, *args)
    if fn is operator.setitem:
        setitem(tx, *args)
        return ConstantVariable(None)
    if fn is operator.contains:
        return ConstantVariable(contains(tx, args[0], args[1]))
    if fn is operator.is_:
        return ConstantVariable(is_same(args[0], args[1], tx))
    if fn is operator.is_not:
        return ConstantVariable(not is_same(args[0], args[1], tx))
    if len(args) == 2:
        return binary_op(tx, fn, args[0], args[1])
    unsupported(f"operator.{fn.__name__} in compiled code")


def unary_op(tx, fn, value: Variable) -> Variable:
    if fn is operator.not_:
        if isinstance(value, TensorVariable):
            unsupported("`not` of a tensor (data-dependent)")
        return ConstantVariable(not value.truthy(tx))
    if fn is operator.truth:
        return ConstantVariable(value.truthy(tx))
    found = user_unary_op(tx, fn, value)
    if found is not None:
        return found
    if isinstance(value, TensorVariable):
        if fn is operator.index:
            unsupported("using a tensor as an index into a Python sequence")
        return record_op(tx, "call_function", fn, [value], {})
    if value.is_constant():
        operand = _arithmetic_value(value)
        if fn is operator.invert and isinstance(operand, torch.SymInt):
            return ConstantVariable(-operand - 1)  # torch.SymInt has no ~; for ints ~n == -n - 1
        try:
            return ConstantVariable(fn(operand))
        except Exception as e:
            unsupported(f"{fn.__name__} raised {type(e).__name__}: {e}")
    unsupported(f"{fn.__name__} of {value}")


def _arithmetic_value(v: Variable):
    """Operators keep symbolic sizes symbolic: their results are expressions, their
    comparisons conditions the shape environment guards where they are decided."""
    return v.symbolic_value() if isinstance(v, ConstantVariable) else v.as_constant()


def binary_op(tx, fn, a: Variable, b: Variable) -> Variable:
    inplace_of = INPLACE_TO_BINARY.get(fn)
    found = user_inplace_op(tx, fn, a, b) if inplace_of is not None else user_binary_op(tx, fn, a, b)
    if found is not None:
        return found
    if fn in (operator.eq, operator.ne) and (is_user_object(a) or is_user_object(b)):
        _check_no_c_equality(a, b)  # every Python method declined (each called once): identity
        return ConstantVariable(is_same(a, b, tx) is (fn is operator.eq))
    if inplace_of is not None and not isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
        # ``n += tensor`` with a Python number: numbers have no in-place form, so
        # Python computes ``n + tensor`` (no graph node may assign to a literal).
        return record_op(tx, "call_function", inplace_of, [a, b], {})
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        return record_op(tx, "call_function", fn, [a, b], {})
    if inplace_of is not None and isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
        # Immutable values: Python tries the left one's own in-place method (a str subclass
        # may define __iadd__), then the plain operator; the in-place operator does both.
        try:
            return tx.wrap(fn(_arithmetic_value(a), _arithmetic_value(b)), None)
        except Exception as e:
            raise_in_user_code(type(e), str(e), args=e.args)
    if inplace_of is not None:
        if isinstance(a, ListVariable) and fn is operator.iadd:
            a.check_mutable(tx)
            a.items.extend(b.iterate(tx))
            return a
        if isinstance(a, DictVariable) and fn is operator.ior:
            from ..variables.container_methods import call_container_method

            call_container_method(tx, a, "update", [b], {})  # in place: every name for it sees the change
            return a
        if isinstance(a, SetVariable) and fn in _SET_INPLACE:
            return _set_in_place(tx, fn, a, b)
        return binary_op(tx, inplace_of, a, b)
    if fn in (operator.add, operator.mul) and (isinstance(a, TupleVariable) or isinstance(b, TupleVariable)):
        result = _SEQUENCE_RULES[fn](tx, a, b)  # before folding: the result may be an operand itself
        if result is not None:
            return result
    if a.is_constant() and b.is_constant():
        try:
            return tx.wrap(fn(_arithmetic_value(a), _arithmetic_value(b)), None)
        except Exception as e:
            raise_in_user_code(type(e), str(e), args=e.args)
    rule = _SEQUENCE_RULES.get(fn)
    if rule is not None:
        result = rule(tx, a, b)
        if result is not None:
            return result
    if fn in (operator.eq, operator.ne):
        equal = compare_equal(tx, a, b)
        return ConstantVariable(equal if fn is operator.eq else not equal)
    unsupported(f"operator {fn.__name__} on {a} and {b}")


_SET_INPLACE = (operator.ior, operator.iand, operator.isub, operator.ixor)


def _set_in_place(tx, fn, a: SetVariable, b: Variable) -> SetVariable:
    """``s |= t`` (``&=``, ``-=``, ``^=``): the set itself changes, as CPython's in-place set
    operators change it (an alias sees it)."""
    if a.source is not None or a.frozen:
        unsupported("mutating a set that came from the function's inputs")
    result = binary_op(tx, INPLACE_TO_BINARY[fn], a, b)
    if not isinstance(result, SetVariable):
        unsupported(f"{fn.__name__} of a set with {b}")
    a.items = SetEntries(result.items)
    return a


def _exact_tuple(value) -> bool:
    return isinstance(value, TupleVariable) and value.cls is None


def _empty_tuple(value) -> bool:
    if isinstance(value, TupleVariable):
        return not value.items
    return value.is_constant() and type(value.as_constant()) is tuple and not value.as_constant()


def _concat(tx, a, b):
    # CPython hands back an exact tuple operand when the other one is an empty tuple.
    if _exact_tuple(a) and _empty_tuple(b):
        return a
    if _exact_tuple(b) and _empty_tuple(a):
        return b
    if isinstance(a, TupleVariable) and isinstance(b, TupleVariable):
        return TupleVariable(a.items + b.items)
    if isinstance(a, ListVariable) and isinstance(b, ListVariable):
        return ListVariable(a.items + b.items)
    return None


def _repeat(tx, a, b):
    if isinstance(b, BaseSequenceVariable) and a.is_constant() and not isinstance(a, BaseSequenceVariable):
        a, b = b, a
    if isinstance(a, BaseSequenceVariable) and b.is_constant():
        count = b.as_constant()
        if _exact_tuple(a) and (count == 1 or not a.items):
            return a  # CPython's tuple repeat returns the tuple itself
        return a.rebuild(a.items * count)
    return None


def _views_as_sets(rule):
    """A set operation with a keys or items view on either side: both sides as sets."""
    def with_views(tx, a, b):
        if any(isinstance(v, DictViewVariable) and v.is_set_like() for v in (a, b)):
            a, b = set_of_iterable(tx, as_set_operand(tx, a)), set_of_iterable(tx, as_set_operand(tx, b))
        return rule(tx, a, b)
    return with_views


def _merge(tx, a, b):
    if isinstance(a, DictVariable) and isinstance(b, DictVariable):
        return _dict_union(a, b)
    if isinstance(a, SetVariable) and isinstance(b, SetVariable):
        return set_operation(tx, a, "union", [b])
    return None


def _dict_union(a: DictVariable, b: DictVariable) -> DictVariable:
    """``a | b`` as the operands' classes define it: a defaultdict or OrderedDict on either side
    makes one of its kind (the left one's ``__or__`` first, then the right one's ``__ror__``; a
    defaultdict keeps its own factory), plain dicts make a dict."""
    merged = {**a.items, **b.items}
    for own in (a, b):
        if own.cls in (collections.defaultdict, collections.OrderedDict):
            result = DictVariable(merged, cls=own.cls)
            result.default_factory = own.default_factory
            return result
        if own.cls is collections.Counter:
            unsupported("| of Counters (a multiset union) in compiled code")
    return DictVariable(merged)


def _set_op(name: str):
    def rule(tx, a, b):
        if isinstance(a, SetVariable) and isinstance(b, SetVariable):
            return set_operation(tx, a, name, [b])
        return None
    return rule


_SEQUENCE_RULES = {
    operator.add: _concat,
    operator.mul: _repeat,
    operator.or_: _views_as_sets(_merge),
    operator.and_: _views_as_sets(_set_op("intersection")),
    operator.sub: _views_as_sets(_set_op("difference")),
    operator.xor: _views_as_sets(_set_op("symmetric_difference")),
}


def is_same(a: Variable, b: Variable, tx=None) -> bool:
    """Python's ``a is b`` for symbolic values."""
    if a is b:
        return True
    if (isinstance(a, TensorVariable) and isinstance(b, TensorVariable) and a.real is not None
            and b.real is not None and a.source is not None and b.source is not None and tx is not None):
        # Two inputs read from different places: decided by the objects, and guarded.
        same = a.real is b.real
        tx.guards.same_object(a.source, b.source, same)
        return same
    made = [v for v in (a, b) if isinstance(v, (BaseSequenceVariable, SetVariable, DictVariable)) and v.source is None]
    if made:
        return False  # a container the trace made is one variable per object: a different one is another
    if a.is_constant() and b.is_constant():
        x, y = a.as_constant(), b.as_constant()
        if x is y:
            return True
        if type(x) is not type(y) or x != y:
            return False
        if type(x) is int and -5 <= x <= 256:
            return True  # CPython's small ints are shared objects
        if type(x) in (int, float, complex, str, bytes, tuple, frozenset):
            # Equal immutables may or may not be one object, depending on how each was made;
            # a break would hand CPython rebuilt values, whose identity says nothing either:
            # the frame runs eagerly.
            error = Unsupported(f"`is` between equal {type(x).__name__} values (CPython's answer depends "
                                "on how they were made)")
            error.unsplittable = True
            raise error
        return False
    if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
        # One graph value may be several Python objects: as_subclass makes a new one each call.
        return a.node is b.node and not (getattr(a, "own_object", False) or getattr(b, "own_object", False))
    key_a, key_b = getattr(a, "identity_key", None), getattr(b, "identity_key", None)
    if key_a is not None and key_b is not None:
        key_a, key_b = key_a(), key_b()
        if tx is not None and isinstance(a, UserObjectVariable) and isinstance(b, UserObjectVariable):
            tx.note_identity(a, key_a.obj)  # objects guarded by type: whether they are one is guarded
            tx.note_identity(b, key_b.obj)
        return key_a == key_b
    return False


def compare_equal(tx, a: Variable, b: Variable) -> bool:
    """Python's ``a == b`` where it must be a bool (``in``, ``index``, ``==`` on containers)."""
    if is_same(a, b, tx):
        return True
    if isinstance(a, MappingProxyVariable) or isinstance(b, MappingProxyVariable):  # compares as its dict
        return compare_equal(tx, a.dict if isinstance(a, MappingProxyVariable) else a,
                             b.dict if isinstance(b, MappingProxyVariable) else b)
    views = view_equal(tx, a, b)
    if views is not None:
        return views
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        if a.is_constant() and a.as_constant() is None or b.is_constant() and b.as_constant() is None:
            return False
        unsupported("comparing tensors for equality as a Python bool (data-dependent)")
    if a.is_constant() and b.is_constant():
        return a.as_constant() == b.as_constant()
    if isinstance(a, BaseSequenceVariable) and isinstance(b, BaseSequenceVariable):
        return (a.python_type() is b.python_type() or {a.python_type(), b.python_type()} <= {tuple}) \
            and _sequences_equal(tx, a.items, b.items)
    if isinstance(a, DictVariable) and isinstance(b, DictVariable):
        return a.items.keys() == b.items.keys() and all(compare_equal(tx, a.items[k], b.items[k]) for k in a.items)
    bound = _bound_methods_equal(tx, a, b)
    if bound is not None:
        return bound
    return _user_equal(tx, a, b)


def _bound_methods_equal(tx, a: Variable, b: Variable) -> bool | None:
    """Bound methods are equal when they bind one function to one object (``__self__``
    compared by identity, never by its ``__eq__``); None when these are not both such."""
    if isinstance(a, UserMethodVariable) and isinstance(b, UserMethodVariable) \
            and isinstance(a.fn, UserFunctionVariable) and isinstance(b.fn, UserFunctionVariable):
        return a.fn.fn is b.fn.fn and is_same(a.self_var, b.self_var, tx)
    if isinstance(a, ContainerMethodVariable) and isinstance(b, ContainerMethodVariable):
        return a.name == b.name and is_same(a.container, b.container, tx)
    return None


def _user_equal(tx, a: Variable, b: Variable) -> bool:
    """``a == b`` of objects: the Python ``__eq__`` methods in CPython's order (a subclass's
    first, the other's when one returns NotImplemented), else identity (``is_same`` said no)."""
    result = user_binary_op(tx, operator.eq, a, b)
    if result is not None:
        if not result.is_constant():
            unsupported(f"{result} as the result of == on {a.python_type().__qualname__}, not a constant")
        return bool(result.as_constant())
    _check_no_c_equality(a, b)
    return False


def _sequences_equal(tx, a: list, b: list) -> bool:
    """CPython's list comparison: the lengths, then the items up to the first unequal pair,
    then the lengths again (an item's ``__eq__`` may have emptied either list)."""
    if len(a) != len(b):
        return False
    i = 0
    while i < len(a) and i < len(b) and compare_equal(tx, a[i], b[i]):
        i += 1
    return len(a) == len(b) if i >= len(a) or i >= len(b) else False


def _check_no_c_equality(a: Variable, b: Variable) -> None:
    """After every Python ``__eq__`` declined: ``==`` is identity unless an object's class
    has an ``__eq__`` that is not Python code (a builtin base class's), which is not modelled."""
    for side in (a, b):
        method = getattr(side.python_type(), "__eq__", object.__eq__) \
            if isinstance(side, (ObjectVariable, NewObjectVariable)) else object.__eq__
        if method is not object.__eq__ and not isinstance(method, types.FunctionType):
            unsupported(f"comparing a {side.python_type().__qualname__} (its __eq__ is not Python code)")


def contains(tx, container: Variable, item: Variable) -> bool:
    if isinstance(container, TensorVariable):
        unsupported("`in` on a tensor (data-dependent)")
    if isinstance(container, (DictVariable, SetVariable)):
        return _key_of(tx, item) in container.items
    if isinstance(container, DictViewVariable):
        return container.contains(tx, item)
    if container.is_constant() and item.is_constant():
        return item.as_constant() in container.as_constant()
    from ..variables.objects import NNModuleVariable

    if isinstance(container, NNModuleVariable) and item.is_constant():
        container.guard_members(tx)
        return item.as_constant() in container.module._modules
    handler = getattr(container, "contains", None)
    if handler is not None and item.is_constant():
        return handler(tx, item)
    found = call_python_dunder(tx, container, "__contains__", [item])
    if found is not None:
        return found.truthy(tx)
    return any(compare_equal(tx, item, x) for x in container.iterate(tx))


def getitem(tx, obj: Variable, index: Variable) -> Variable:
    if isinstance(obj, TensorVariable):
        return record_op(tx, "call_function", operator.getitem, [obj, index], {})
    if isinstance(index, TensorVariable) and not isinstance(obj, DictVariable) \
            and not getattr(obj, "keys_tensors_by_identity", False):  # a dict keys tensors by identity
        unsupported("indexing a Python container with a tensor")
    handler = getattr(obj, "getitem", None)
    if handler is not None:
        return handler(tx, index)
    result = call_python_dunder(tx, obj, "__getitem__", [index])
    if result is not None:
        return result
    if obj.is_constant():
        try:
            return tx.wrap(obj.as_constant()[index.as_constant()], None)
        except Exception as e:
            raise_in_user_code(type(e), str(e), args=e.args)
    unsupported(f"indexing {obj}")


def setitem(tx, obj: Variable, index: Variable, value: Variable) -> None:
    if isinstance(obj, TensorVariable):
        record_op(tx, "call_function", operator.setitem, [obj, index, value], {})
        return
    if isinstance(obj, ListVariable):
        obj.check_mutable(tx)
        key = index.as_constant()
        if isinstance(key, slice):
            obj.items[key] = value.iterate(tx)
        else:
            obj.items[key] = value
        return
    if isinstance(obj, DictVariable):
        obj.check_mutable(tx)
        obj.items[_key_of(tx, index)] = value
        return
    if call_python_dunder(tx, obj, "__setitem__", [index, value]) is not None:
        return
    unsupported(f"item assignment on {obj}")


def delitem(tx, obj: Variable, index: Variable) -> None:
    if isinstance(obj, ListVariable):
        obj.check_mutable(tx)
        del obj.items[index.as_constant()]
        return
    if isinstance(obj, DictVariable):
        obj.check_mutable(tx)
        key = _key_of(tx, index)
        if obj.items.pop(key, _ABSENT) is _ABSENT:
            raise_in_user_code(KeyError, repr(key), args=(key,))
        return
    if call_python_dunder(tx, obj, "__delitem__", [index]) is not None:
        return
    unsupported(f"del on {obj}")
