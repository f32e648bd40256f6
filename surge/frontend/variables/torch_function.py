"""Tensor subclasses that override ``__torch_function__``, traced as eager runs them.

In eager, every torch function, tensor method, operator and tensor property applied to
an instance of such a class calls ``type(arg).__torch_function__(func, types, args,
kwargs)`` instead of the op; the override usually runs ``func`` with subclass dispatch
disabled (``torch._C.DisableTorchFunctionSubclass()``, or ``super().__torch_function__``)
and re-wraps the results. The trace does the same, symbolically: the override is
inlined, ``func`` is recorded as a plain graph op, and the variables it returns carry
the class (and the Python attributes) the override gave them. The graph itself only
ever sees plain tensors; the entry passes a subclass input as a plain alias
(``PlainTensorSource``) and turns outputs back into the subclass (``rewrap``).

What torch hands the override (which ``func`` object, the argument order of an
operator, keywords a ``torch.nn.functional`` function adds) is not modelled by a table:
the op is first run on meta tensors in which each overriding tensor is a *probe*, an
instance of a class whose ``__torch_function__`` records its arguments and stops the
op. The order in which several overriding arguments are tried, ``NotImplemented`` and
the error when every override declines follow ``torch.overrides``.

Guards: the subclass type of each input, the class's ``__torch_function__`` (its MRO
entry) and, once any override was considered, whether subclass dispatch is enabled at
the call (``torch._C._is_torch_function_enabled()``).
"""
from __future__ import annotations

import operator
import types
import weakref

import torch

from ..sources import ConstSource
from .base import Variable, raise_in_user_code, unsupported
from .constant import NONE, ConstantVariable, is_constant_value

_DISABLED_IMPL = torch._C._disabled_torch_function_impl
DEFAULT_TORCH_FUNCTION = torch.Tensor.__dict__["__torch_function__"]  # a classmethod
_ABSENT = object()


def _class_lookup(cls: type, name: str):
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _ABSENT


def overrides_torch_function(cls: type) -> bool:
    """Whether instances of ``cls`` dispatch to a ``__torch_function__`` (plain tensors
    and Parameters do not: torch skips ``torch.Tensor``'s own, Parameter disables it)."""
    if cls is torch.Tensor or not issubclass(cls, torch.Tensor):
        return False
    return _class_lookup(cls, "__torch_function__") not in (_DISABLED_IMPL, _ABSENT)


def is_overriding(value: Variable) -> bool:
    from .tensor import TensorVariable

    return isinstance(value, TensorVariable) and overrides_torch_function(value.cls)


def _relevant(values, classes=None) -> list:
    """The overriding tensors among ``values`` (items of lists and tuples included), in
    order; with ``classes``, the tensors of those classes (torch's Python-level dispatch
    counts plain tensors too, under ``torch.Tensor``)."""
    from .containers import ListVariable, TupleVariable
    from .tensor import TensorVariable

    def wanted(v):
        if classes is None:
            return is_overriding(v)
        return isinstance(v, TensorVariable) and v.cls in classes

    found = []
    for value in values:
        if isinstance(value, (ListVariable, TupleVariable)):
            found += [item for item in value.items if wanted(item)]
        elif wanted(value):
            found.append(value)
    return found


def subclass_dispatch_enabled(tx) -> bool:
    """Whether overrides run now; the state at the call is guarded the first time."""
    if not tx.torch_function_guarded:
        tx.torch_function_guarded = True
        enabled = tx.torch_function_at_entry
        ref = tx.guards.consts.ref(torch._C._is_torch_function_enabled, "is_torch_function_enabled")
        tx.guards.add(None, f"{ref}() is {enabled}", f"torch function subclass dispatch enabled is {enabled}")
    return tx.torch_function_enabled


def dispatch(tx, kind: str, target, args: list, kwargs: dict):
    """The override's result for an op about to be recorded, or None when no argument
    overrides ``__torch_function__`` (or dispatch is disabled): record the op then."""
    if not _relevant(list(args) + list(kwargs.values())) or not subclass_dispatch_enabled(tx):
        return None
    seen = _probe(kind, target, args, kwargs)
    if seen is None:
        return None
    func, classes, probe_args, probe_kwargs, table = seen
    call_args = [_unprobe(a, table) for a in probe_args]
    call_kwargs = {k: _unprobe(v, table) for k, v in probe_kwargs.items()}
    if kind == "call_function" and len(args) == 2 and target in _BINARY_OPERATORS:
        # Python's operator protocol: every override declining is NotImplemented from
        # both operands' methods, so ``==`` falls back to identity and ``+`` raises.
        result = call_overrides(tx, func, call_args, call_kwargs, declined=None, classes=classes)
        if result is None:
            result = _reflected(tx, target, args)
        return result if result is not None else _operator_declined(target, args)
    return call_overrides(tx, func, call_args, call_kwargs, classes=classes)


def _reflected(tx, target, args):
    """Python's second try, ``type(b).__r<op>__(b, a)``, when ``b`` is a tensor too (its
    own dispatch, which may find an override that accepts)."""
    from ..interpreter.python_operators import BINARY_DUNDERS
    from .tensor import TensorVariable

    a, b = args
    if not isinstance(b, TensorVariable):
        return None
    seen = _probe("call_method", BINARY_DUNDERS[target][1], [b, a], {})
    if seen is None:
        return None
    func, classes, probe_args, probe_kwargs, table = seen
    return call_overrides(tx, func, [_unprobe(v, table) for v in probe_args],
                          {k: _unprobe(v, table) for k, v in probe_kwargs.items()}, declined=None, classes=classes)


def _operator_declined(target, args):
    from ..interpreter.python_operators import BINARY_DUNDERS

    if target in (operator.eq, operator.ne):
        same = args[0] is args[1]
        return ConstantVariable(same if target is operator.eq else not same)
    symbol = BINARY_DUNDERS[target][2]
    left, right = (a.python_type().__name__ for a in args)
    if target in (operator.lt, operator.le, operator.gt, operator.ge):
        raise_in_user_code(TypeError, f"'{symbol}' not supported between instances of '{left}' and '{right}'")
    raise_in_user_code(TypeError, f"unsupported operand type(s) for {symbol}: '{left}' and '{right}'")


_BINARY_OPERATORS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod, operator.pow,
    operator.matmul, operator.and_, operator.or_, operator.xor, operator.lshift, operator.rshift,
    operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
}


def dispatch_method(tx, tensor, name: str, args: list, kwargs: dict):
    """``tensor.name(*args, **kwargs)`` on an overriding tensor: ``func`` is the
    ``torch.Tensor`` method, ``args`` start with the tensor."""
    if not _relevant([tensor, *args, *kwargs.values()]) or not subclass_dispatch_enabled(tx):
        return None
    found = dispatch(tx, "call_method", name, [tensor, *args], kwargs)
    if found is not None or _probe_args(args, kwargs) is not None:
        return found  # the probe ran: its answer holds (None: the method calls no override)
    func = getattr(torch.Tensor, name, None)
    if func is None:
        return None
    return call_overrides(tx, func, [tensor, *args], dict(kwargs))


def dispatch_property(tx, tensor, name: str):
    """Reading a property of ``torch.Tensor`` (``x.shape``, ``x.grad``) on an overriding
    tensor: torch calls the override with the property's getter."""
    if not is_overriding(tensor) or not subclass_dispatch_enabled(tx):
        return None
    descriptor = _class_lookup(torch.Tensor, name)
    if not isinstance(descriptor, types.GetSetDescriptorType) or name in ("__dict__", "__class__"):
        return None
    return call_overrides(tx, descriptor.__get__, [tensor], {})


# ---- finding what torch hands the override --------------------------------------


class _Seen(Exception):
    """Raised by a probe's ``__torch_function__``: what torch called it with."""


class _Probe(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise _Seen(func, types, args, kwargs or {})


# user class -> its probe class (one per class: ``types`` tells them apart); weak, so a
# class defined in a function dies with it.
_PROBE_CLASSES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _probe_class(cls: type) -> type:
    probe = _PROBE_CLASSES.get(cls)
    if probe is None:
        probe = _PROBE_CLASSES[cls] = type(f"Probe_{cls.__name__}", (_Probe,), {"probed": weakref.ref(cls)})
    return probe


def _probe(kind, target, args, kwargs):
    """(func, args, kwargs, table) that torch would pass to an override of this op, over
    meta tensors (probes for overriding arguments; ``table`` maps them back), or None
    when the op calls no override."""
    table: dict = {}
    probed = _probe_args(args, kwargs, table)
    if probed is None:
        return None
    meta_args, meta_kwargs = probed
    try:
        if kind == "call_method":
            getattr(meta_args[0], target)(*meta_args[1:], **meta_kwargs)
        else:
            target(*meta_args, **meta_kwargs)
    except _Seen as seen:
        func, seen_types, seen_args, seen_kwargs = seen.args
        classes = {t.probed() if issubclass(t, _Probe) else t for t in seen_types}
        return func, classes, seen_args, seen_kwargs, table
    except Exception:
        return None  # the op fails on its own: recorded as usual, where that failure shows
    return None


class _NotProbed(Exception):
    pass


def _probe_args(args, kwargs, table=None):
    """(args, kwargs) over meta tensors and probes, or None when some argument is not
    a tensor, a Python value, a class or a sequence of those."""
    table = {} if table is None else table
    try:
        return [_to_probe(a, table) for a in args], {k: _to_probe(v, table) for k, v in kwargs.items()}
    except _NotProbed:
        return None


def _to_probe(value: Variable, table: dict):
    from .containers import ListVariable, SliceVariable, TupleVariable
    from .tensor import TensorVariable

    if isinstance(value, TensorVariable):
        meta = value.example.as_subclass(_probe_class(value.cls)) if overrides_torch_function(value.cls) \
            else value.example
        table[id(meta)] = (meta, value)
        return meta
    if isinstance(value, ConstantVariable):
        return value.value
    if isinstance(value, (ListVariable, TupleVariable)):
        items = [_to_probe(v, table) for v in value.items]
        return items if isinstance(value, ListVariable) else tuple(items)
    if isinstance(value, SliceVariable):
        return slice(*(_to_probe(v, table) for v in (value.start, value.stop, value.step)))
    from .objects import ClassVariable

    if isinstance(value, ClassVariable):
        return value.cls
    raise _NotProbed


def _unprobe(value, table: dict) -> Variable:
    from .containers import ListVariable, TupleVariable

    if isinstance(value, torch.Tensor):
        found = table.get(id(value))
        if found is None or found[0] is not value:
            unsupported("a __torch_function__ call with a tensor argument torch made itself")
        return found[1]
    if isinstance(value, list):
        return ListVariable([_unprobe(v, table) for v in value])
    if type(value) is tuple:
        return TupleVariable([_unprobe(v, table) for v in value])
    if is_constant_value(value):
        return ConstantVariable(value)
    if isinstance(value, type):
        from .objects import ClassVariable

        return ClassVariable(value)
    unsupported(f"a {type(value).__name__} argument of a __torch_function__ call")


# ---- calling the overrides -------------------------------------------------------


def _dispatch_order(relevant: list) -> list:
    """torch.overrides' order: one argument per type, subclasses before their bases,
    otherwise left to right."""
    ordered: list = []
    for arg in relevant:
        if any(arg.cls is other.cls for other in ordered):
            continue
        index = next((i for i, other in enumerate(ordered) if issubclass(arg.cls, other.cls)), len(ordered))
        ordered.insert(index, arg)
    return ordered


def call_overrides(tx, func, args: list, kwargs: dict, declined=_ABSENT, classes=None) -> Variable:
    """What torch's dispatch returns: the first override not returning NotImplemented;
    if all decline, torch's TypeError (or ``declined``, when given). ``classes``: the
    classes torch considered (some methods look at ``self`` only), default all."""
    from .containers import DictVariable, TupleVariable
    from .objects import ClassVariable

    overloaded = _dispatch_order(_relevant(list(args) + list(kwargs.values()), classes))
    types_var = TupleVariable([ClassVariable(arg.cls) for arg in overloaded])
    call_args = [function_variable(tx, func), types_var, TupleVariable(list(args)), DictVariable(dict(kwargs))]
    for arg in overloaded:
        with tx.device_modes.override_handler():
            result = override_of(tx, arg).call(tx, call_args, {})
        if not (result.is_constant() and result.as_constant() is NotImplemented):
            return result
    if declined is not _ABSENT:
        return declined
    handlers = "".join(f"  - tensor subclass {arg.cls}\n" for arg in overloaded)
    raise_in_user_code(TypeError, f"Multiple dispatch failed for '{_public_name(func)}'; all __torch_function__ "
                                  f"handlers returned NotImplemented:\n\n{handlers}\n"
                                  "For more information, try re-running with TORCH_LOGS=not_implemented")


def _public_name(func) -> str:
    """How torch names ``func`` in its dispatch errors."""
    if type(func).__name__ == "method-wrapper":
        return f"torch.Tensor.{func.__self__.__name__}.__get__"
    name = getattr(func, "__name__", repr(func))
    if getattr(torch.Tensor, name, None) is func:
        return f"torch.Tensor.{name}"
    module = getattr(func, "__module__", None) or "torch"
    return f"{'torch' if module.startswith('torch._') else module}.{name}"


def override_of(tx, arg) -> Variable:
    """The ``__torch_function__`` bound as torch calls it (a classmethod to the class),
    its MRO entry guarded."""
    from .class_attributes import guard_class_entry
    from .functions import UserFunctionVariable, UserMethodVariable
    from .objects import ClassVariable

    cls = arg.cls
    impl = _class_lookup(cls, "__torch_function__")
    guard_class_entry(tx, cls, "__torch_function__", impl)
    if impl is DEFAULT_TORCH_FUNCTION:
        return DefaultTorchFunctionVariable(cls)
    if isinstance(impl, classmethod) and isinstance(impl.__func__, types.FunctionType):
        return UserMethodVariable(UserFunctionVariable(impl.__func__), ClassVariable(cls, ConstSource(cls, cls.__qualname__)))
    if isinstance(impl, types.FunctionType):
        return UserMethodVariable(UserFunctionVariable(impl), arg)
    unsupported(f"{cls.__qualname__}.__torch_function__ is a {type(impl).__name__}, not Python code")


def function_variable(tx, func) -> Variable:
    """The ``func`` an override receives: calling a torch one (dispatch disabled) records
    the op; a user function given to ``handle_torch_function`` is inlined."""
    from .objects import is_torch_library_code
    from .torch_fns import TorchFunctionVariable

    if type(func).__name__ == "method-wrapper" and isinstance(getattr(func, "__self__", None),
                                                              types.GetSetDescriptorType):
        return TensorGetterVariable(func)
    if isinstance(func, types.FunctionType) and not is_torch_library_code(func):
        return tx.wrap(func, None)
    return TorchFunctionVariable(func, None)


class TensorGetterVariable(Variable):
    """``torch.Tensor.<property>.__get__``: what torch passes an override for ``x.shape``."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__self__.__name__

    def python_type(self):
        return type(self.fn)

    def truthy(self, tx):
        return True

    def identity_key(self):
        from .containers import IdentityKey

        return IdentityKey(self, self.fn)

    def getattr(self, tx, name):
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(getattr(self.fn, name))
        if name == "__self__":
            return ConstantVariable(self.fn.__self__)
        unsupported(f"attribute {name!r} of a tensor property getter")

    def call(self, tx, args, kwargs):
        from .tensor import TensorVariable

        if len(args) != 1 or kwargs or not isinstance(args[0], TensorVariable):
            unsupported(f"calling the getter of Tensor.{self.name} with {args}")
        return args[0].getattr(tx, self.name)


class DefaultTorchFunctionVariable(Variable):
    """``torch.Tensor.__torch_function__`` bound to ``cls`` (inherited, or reached through
    ``super()``): run ``func`` with subclass dispatch disabled and convert tensor results
    to ``cls``, except for the getters torch leaves alone (``_base``, ``grad``)."""

    def __init__(self, cls: type):
        self.cls = cls

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        from .containers import DictVariable

        names = ("func", "types", "args", "kwargs")
        bound = dict(zip(names, args))
        bound.update(kwargs)
        func, types_var = bound["func"], bound["types"]
        call_args = bound.get("args")
        call_kwargs = bound.get("kwargs")
        if not all(issubclass(self.cls, t.cls) for t in types_var.iterate(tx)):
            return ConstantVariable(NotImplemented)
        positional = call_args.iterate(tx) if call_args is not None else []
        keywords = {}
        if isinstance(call_kwargs, DictVariable):
            keywords = {k: v for k, v in call_kwargs.items.items()}
        with subclass_dispatch_disabled(tx):
            result = func.call(tx, positional, keywords)
        if getattr(func, "fn", None) in torch.overrides.get_default_nowrap_functions():
            return result
        return convert(tx, result, self.cls)


def convert(tx, value: Variable, cls: type) -> Variable:
    """``torch._tensor._convert``: tensors not of ``cls`` become ``cls``, also inside
    tuples and lists."""
    from .containers import ListVariable, TupleVariable
    from .tensor import TensorVariable

    if cls is torch.Tensor:
        return value
    if isinstance(value, TensorVariable) and not issubclass(value.cls, cls):
        return as_subclass(tx, value, cls)
    if isinstance(value, ListVariable):
        return ListVariable([convert(tx, v, cls) for v in value.items])
    if isinstance(value, TupleVariable):
        return TupleVariable([convert(tx, v, cls) for v in value.items], cls=value.cls)
    return value


def as_subclass(tx, tensor, cls: type):
    """``tensor.as_subclass(cls)``: a new object of ``cls`` over the same data and autograd
    history. A graph input gets an alias node, so the result is not the input object."""
    from .tensor import TensorVariable, record_plain_op

    if not (isinstance(cls, type) and issubclass(cls, torch.Tensor)):
        raise_in_user_code(TypeError, "as_subclass(): argument 'cls' must be a subclass of torch.Tensor")
    node_var = tensor
    if tensor.node.op == "placeholder":
        node_var = record_plain_op(tx, "call_method", "view_as", [tensor, tensor], {})
    made = TensorVariable(node_var.node, node_var.example, node_var.device, cls=cls)
    # A Python object of its own over the same graph value: `is` tells it from the tensor it came from.
    made.own_object = True
    return made


class subclass_dispatch_disabled:
    """``with``: the trace runs ops with subclass dispatch off (and back as it was)."""

    def __init__(self, tx):
        self.tx = tx

    def __enter__(self):
        self.prior = self.tx.torch_function_enabled
        self.tx.torch_function_enabled = False

    def __exit__(self, *exc):
        self.tx.torch_function_enabled = self.prior


class DisableTorchFunctionContextVariable(Variable):
    """``torch._C.DisableTorchFunctionSubclass()`` / ``DisableTorchFunction()`` in user
    code: subclass dispatch off; the second also turns torch's default-device modes off
    for factories (``device_modes.py``)."""

    def __init__(self, cls):
        self.cls = cls
        self.prior = None

    def python_type(self):
        return self.cls

    def truthy(self, tx):
        return True

    def enter(self, tx):
        self.prior = tx.torch_function_enabled
        tx.torch_function_enabled = False
        tx.device_modes.disabled += self.cls is torch._C.DisableTorchFunction
        return NONE

    def exit(self, tx):
        tx.torch_function_enabled = self.prior
        tx.device_modes.disabled -= self.cls is torch._C.DisableTorchFunction
        return NONE

    def getattr(self, tx, name):
        from .contexts import context_method

        return context_method(self, name) or unsupported(f"attribute {name!r} of {self.cls.__name__}")


DISABLE_CLASSES = (torch._C.DisableTorchFunctionSubclass, torch._C.DisableTorchFunction)
