"""Turning a real Python value read from the inputs into a symbolic value, with its guards.

``wrap_value(tx, value, source)`` is called whenever the trace reads a value
from outside (an argument, a global, a closure cell, an attribute of an input
object). With a source, it installs the guards the value's kind needs (tensor
metadata, constant value, container length/keys, object identity or type);
without one (values derived from trusted libraries) it only wraps.
"""
from __future__ import annotations

import collections
import enum
import functools
import types
import weakref

import torch

from .iterators import ReversedIterator, SequenceIterator
from ..sources import (
    AttrSource, CallSource, ItemSource, PlainTensorSource, PositionSource, ProxiedMappingSource, is_typing_form,
    proxied_mapping,
)
from ..wrappers import compiled_original
from .base import unsupported
from .autocast import wrap_autocast_object
from ..entry import CompiledFunction
from .builtins import BUILTIN_RULES, BuiltinVariable, adopt_dynamo_graph_break
from .constant import ConstantVariable, is_constant_value
from .containers import (
    DictVariable, IteratorVariable, ListVariable, SetEntries, SetVariable, SliceVariable, TupleVariable,
)
from .functions import (
    CACHE_WRAPPER_TYPE, OpaqueCallableVariable, PartialVariable, UserFunctionVariable, UserMethodVariable,
    cached_function_variable, guarded_by_code,
)
from . import copies, cond, dataclass_rules, mapping_proxies, signatures  # noqa: F401  (register their rules)
from .objects import (
    ClassVariable, NNModuleVariable, PythonModuleVariable, UserObjectVariable, WeakRefVariable, is_torch_library_code,
    static_lookup,
)
from .class_attributes import guard_class_entry
from .optimizers import OptimizerVariable
from .tensor import TensorVariable
from .tensor_subclasses import plain_alias
from .torch_function import overrides_torch_function
from ..dynamic_dims import tensor_guard
from .torch_fns import TorchFunctionVariable, has_torch_rule

_CALLABLE_TYPES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodDescriptorType,
                   types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType)


def wrap_value(tx, value, source):
    guards = tx.guards if source is not None else None
    if isinstance(value, torch.Tensor):
        return _wrap_tensor(tx, value, source)
    if isinstance(value, enum.Enum):
        if guards:
            guards.identity(source, value)
        return ConstantVariable(value, source)
    if is_constant_value(value) and not isinstance(value, tuple):
        symbolic = tx.dynamic.number(tx, value, source) if guards else None
        if symbolic is not None:  # guarded by the shape environment (its type and facts)
            return ConstantVariable(symbolic, source)
        if guards:
            guards.constant(source, value)
        return ConstantVariable(value, source)
    if type(value) is slice:  # with a tensor among its bounds (else a constant, above)
        if guards:
            guards.type_is(source, slice)
        return SliceVariable(*(wrap_value(tx, getattr(value, part), AttrSource(source, part) if source else None)
                               for part in ("start", "stop", "step")))
    if type(value) is types.MappingProxyType and guards and type(proxied_mapping(value)) is dict:
        # A proxy CPython made (at a graph break): live over its dict, which the trace reads.
        from .mapping_proxies import MappingProxyVariable

        guards.type_is(source, types.MappingProxyType)
        return MappingProxyVariable(tx.wrap(proxied_mapping(value), ProxiedMappingSource(source)))
    if type(value) is list and guards:
        guards.type_is(source, list)

        def read():  # on first use of the items: what they are, guarded
            guards.length(source, list, len(value))
            return [tx.wrap(v, ItemSource(source, i)) for i, v in enumerate(value)]
        return ListVariable.unread(read, source)
    if type(value) in (tuple, list) or (isinstance(value, tuple) and hasattr(type(value), "_fields")) \
            or isinstance(value, torch.Size):
        if guards:
            guards.length(source, type(value), len(value), value)
        _check_no_instance_attributes(tx, value, source)  # (a namedtuple's subclass may have them)
        items = [tx.wrap(v, ItemSource(source, i) if source is not None else None)
                 for i, v in enumerate(value)]
        if isinstance(value, list):
            return ListVariable(items, source=source)
        if isinstance(value, torch.Size):
            return ConstantVariable(value, source)
        return TupleVariable(items, cls=None if type(value) is tuple else type(value), source=source)
    if type(value) in _DICT_CLASSES:
        _check_no_instance_attributes(tx, value, source)  # (an OrderedDict or Counter may have them)
        keys = tuple(value)
        if not all(is_constant_value(k) for k in keys):
            return _wrap_dict_keyed_by_objects(tx, value, source)
        if guards:
            guards.dict_keys(source, type(value), keys)
        items = {k: tx.wrap(v, ItemSource(source, k) if source is not None else None)
                 for k, v in value.items()}
        var = DictVariable(items, source=source, cls=type(value))
        if isinstance(value, collections.defaultdict) and value.default_factory is not None:
            # Its factory makes missing entries (and its copies keep it): read, and guarded, through it.
            var.default_factory = wrap_value(
                tx, value.default_factory, AttrSource(source, "default_factory") if source is not None else None)
        return var
    if type(value) in (set, frozenset):
        if not all(is_constant_value(v) for v in value):
            return _wrap_set_of_objects(tx, value, source)
        if guards:
            guards.add(source, f"type({{v}}) is {type(value).__name__} and {{v}} == {set(value)!r}",
                       f"{source.name()} == {set(value)!r}")
        # Over its very table (so it iterates as CPython's does; the trace never changes an input set).
        return SetVariable(SetEntries.over(value, ConstantVariable), source=source, frozen=type(value) is frozenset)
    if type(value) in _SEQUENCE_ITERATORS or (type(value) is reversed and _reversed_of_a_sequence(value)):
        return _wrap_sequence_iterator(tx, value, source)
    if isinstance(value, torch.nn.Module):
        if guards and _made_per_call(tx, source):
            # An identity guard would fail on every call: its attributes are guarded as read.
            guards.type_is(source, type(value))
            return NNModuleVariable(value, source, by_type=True)
        if guards:
            guards.identity(source, value)
        return NNModuleVariable(value, source)
    if isinstance(value, types.ModuleType):
        if guards:
            guards.identity(source, value)
        return PythonModuleVariable(value, source)
    if guards:
        if _is_nested_function(value):
            # Made anew by each call of its enclosing function (or rebuilt at a graph
            # break): guarded by code and globals; defaults and cells are read through
            # the source and guarded where the trace reads them.
            guards.add(source, f"type({{v}}) is {guards.consts.ref(types.FunctionType, 'FunctionType')} "
                       f"and {{v}}.__code__ is {guards.consts.ref(value.__code__, 'code')} "
                       f"and {{v}}.__globals__ is {guards.consts.ref(value.__globals__, 'f_globals')}",
                       f"{source.name()} is a function of code {value.__qualname__}")
        elif isinstance(value, types.MethodType):
            # A bound method is made on each attribute read: guarded by its function; its
            # object is guarded through ``__self__`` where the trace reads it.
            guards.add(source, f"type({{v}}) is {guards.consts.ref(types.MethodType, 'MethodType')} "
                       f"and {{v}}.__func__ is {guards.consts.ref(value.__func__, 'func')}",
                       f"{source.name()} is a method of function {getattr(value.__func__, '__qualname__', '?')}")
        elif isinstance(value, (types.FunctionType, type) + _CALLABLE_TYPES):
            guards.identity(source, value)
    return _wrap_callable_or_object(tx, value, source)


_SEQUENCE_ITERATORS = (type(iter([])), type(reversed([])), type(iter(())))


def _reversed_of_a_sequence(value) -> bool:
    """``reversed(tuple)`` (a ``reversed`` object over a tuple, or exhausted)."""
    return type(value.__reduce__()[1][0]) is tuple
# Dicts modelled as dicts (a dict subclass of a freshly imported ``collections``, the
# pure-Python OrderedDict, is another class: an object whose methods are traced).
_DICT_CLASSES = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)


def _wrap_dict_keyed_by_objects(tx, value: dict, source):
    """A dict with keys other than constants: a table keyed by classes or typing forms (keys
    held by identity, the key tuple guarded by identity), or by objects (a dict of user
    objects a graph break hands over: each key read from its position, then hashed in the
    trace as CPython hashed it, hashing.py)."""
    from .containers import IdentityKey, _key_of

    if all(is_constant_value(k) or isinstance(k, type) or is_typing_form(k) for k in value):
        if source is not None:
            cls = tx.guards.consts.ref(type(value), type(value).__name__)
            keys = "".join((repr(k) if is_constant_value(k) else tx.guards.consts.ref(k, "key")) + ", " for k in value)
            tx.guards.add(source, f"type({{v}}) is {cls} and tuple({{v}}) == ({keys})",
                          f"type({source.name()}) is {type(value).__qualname__} and keys == {list(value)!r}")
        items = {}
        for k, v in value.items():
            key = k if is_constant_value(k) else IdentityKey(wrap_value(tx, k, None), k)
            items[key] = tx.wrap(v, ItemSource(source, k) if source is not None else None)
        return DictVariable(items, source=source, cls=type(value))
    if source is None:
        unsupported("a dict keyed by objects that is not reachable from the inputs")
    tx.guards.length(source, type(value), len(value))
    items = {}
    for i, (k, v) in enumerate(value.items()):
        key = tx.wrap(k, PositionSource(source, i, "keys"))
        items[_key_of(tx, key)] = tx.wrap(v, PositionSource(source, i, "values"))
    return DictVariable(items, source=source, cls=type(value))


def _wrap_set_of_objects(tx, value, source):
    """A set with elements other than constants: each read from its position in the set,
    then hashed in the trace (hashing.py)."""
    from .containers import _key_of

    if source is None:
        unsupported("a set of objects that is not reachable from the inputs")
    tx.guards.length(source, type(value), len(value))
    elements = [tx.wrap(v, PositionSource(source, i, "elements")) for i, v in enumerate(value)]
    return SetVariable({_key_of(tx, e): e for e in elements}, source=source, frozen=type(value) is frozenset)


def _check_no_instance_attributes(tx, value, source) -> None:
    """A container modelled by its items whose instances also have a ``__dict__``: one with
    attributes is left to CPython; one without is guarded to have none."""
    if not type(value).__dictoffset__:
        return
    if value.__dict__:
        unsupported(f"a {type(value).__qualname__} with attributes of its own")
    if source is not None:
        tx.guards.add(source, "not {v}.__dict__", f"{source.name()} has no instance attributes")


def _made_per_call(tx, source) -> bool:
    """Whether ``source`` is reached from a root parameter that holds an object made anew
    on every call (a resume function's stack value or a local the break code rebuilt)."""
    while source.parent is not None:
        source = source.parent
    return getattr(source, "param", None) in tx.fresh_parameters


def _is_nested_function(value) -> bool:
    return type(value) is types.FunctionType and guarded_by_code(value)


def _wrap_sequence_iterator(tx, value, source):
    """An iterator over a list or tuple, or ``reversed()`` of one (a resume function's ``for``
    loop iterator, one a graph break made over its sequence): an iterator over that very
    sequence, which is one variable wherever else it is reached (a list's later changes are
    seen), at the position the iterator reached (guarded, as is an exhausted one having let
    go of its sequence)."""
    if source is None:
        unsupported("a list iterator that is not reachable from the inputs")
    tx.guards.type_is(source, type(value))
    reduced = value.__reduce__()  # (iter or reversed, (the sequence,), position), or without one once exhausted
    kind = ReversedIterator if type(value) in (type(reversed([])), reversed) else SequenceIterator
    if len(reduced) < 3:
        tx.guards.add(source, "len({v}.__reduce__()) == 2", f"{source.name()} is exhausted")
        iterator = kind(tx, TupleVariable([]) if type(reduced[1][0]) is tuple else ListVariable([]))
        iterator.seq = None
        return iterator
    tx.guards.add(source, f"{{v}}.__reduce__()[2] == {reduced[2]}", f"{source.name()} is at position {reduced[2]}")
    reduce_source = CallSource(AttrSource(source, "__reduce__"))
    iterator = kind(tx, tx.wrap(reduced[1][0], ItemSource(ItemSource(reduce_source, 1), 0)))
    iterator.index = reduced[2]
    return iterator


def _wrap_callable_or_object(tx, value, source):
    if isinstance(value, (torch.autograd.grad_mode.no_grad, torch.autograd.grad_mode.enable_grad)):
        # Checked first: these objects are callable (they decorate functions too).
        from .contexts import GradModeContextVariable

        if source is not None:
            tx.guards.type_is(source, type(value))
        return GradModeContextVariable(isinstance(value, torch.autograd.grad_mode.enable_grad))
    if isinstance(value, torch.amp.autocast):
        return wrap_autocast_object(tx, value, source)
    if type(value) is torch.autograd.profiler.record_function:
        # Re-entered by a resume function after a graph break inside its block.
        from .contexts import ProfilerContextVariable

        if source is not None:
            tx.guards.type_is(source, type(value))
        return ProfilerContextVariable(type(value), [ConstantVariable(value.name)], {})
    if type(value) is functools.partial and source is not None:
        # Its function and bound arguments are read, and guarded, through the object.
        tx.guards.type_is(source, functools.partial)
        fn = tx.wrap(value.func, AttrSource(source, "func"))
        args = tx.wrap(value.args, AttrSource(source, "args"))
        keywords = tx.wrap(value.keywords, AttrSource(source, "keywords"))
        partial = PartialVariable(fn, args.items, dict(keywords.items))
        partial.source = source  # handed to CPython (at a break) as the object itself
        return partial
    if _has_rule(value):
        return BuiltinVariable(value, source)
    if isinstance(value, torch._library.custom_ops.CustomOpDef):
        # A torch.library custom op: one opaque node of its operator; its fake kernel
        # gives the metadata (without one the call is a graph break naming it).
        if source is not None:
            tx.guards.identity(source, value)
        return TorchFunctionVariable(value._opoverload, None)
    if isinstance(value, CACHE_WRAPPER_TYPE) and isinstance(getattr(value, "__wrapped__", None), types.FunctionType):
        return cached_function_variable(tx, value, source)
    original = compiled_original(value)
    if original is not None and isinstance(value, (types.FunctionType, CompiledFunction)):
        # A function compiled on its own, called from compiled code: inline its original.
        return wrap_value(tx, original, None)
    if isinstance(value, types.FunctionType):
        if has_torch_rule(value) or (
                getattr(value, "__code__", None) is not None and _is_torch_op_function(value)):
            return TorchFunctionVariable(value, source)
        return UserFunctionVariable(value, source)
    if isinstance(value, types.MethodType):
        fn = wrap_value(tx, value.__func__, None)
        self_source = AttrSource(source, "__self__") if source is not None else None
        self_var = wrap_value(tx, value.__self__, self_source)
        return UserMethodVariable(fn, self_var, source)
    if isinstance(value, type):
        return ClassVariable(value, source)
    if isinstance(value, _CALLABLE_TYPES) or callable(value) and type(value).__module__.startswith("torch"):
        if _is_torch_op_builtin(value):
            return TorchFunctionVariable(value, source)
        return BuiltinVariable(value, source)
    if source is None:
        if callable(value):
            return OpaqueCallableVariable(value)
        unsupported(f"a {type(value).__qualname__} object in compiled code")
    tx.guards.type_is(source, type(value))
    if isinstance(value, weakref.ReferenceType):
        return WeakRefVariable(value, source)
    if isinstance(value, torch.optim.Optimizer):
        return OptimizerVariable(value, source)
    return UserObjectVariable(value, source)


def _has_rule(value) -> bool:
    if not isinstance(type(value).__hash__, types.WrapperDescriptorType):
        return False  # a hash of the program's own (a user class's, a mock's): its to call, not surge's
    try:
        return value in BUILTIN_RULES or adopt_dynamo_graph_break(value)
    except TypeError:  # unhashable
        return False


def _is_torch_op_function(fn) -> bool:
    """Python functions of torch that become one graph op (F.layer_norm, torch.functional.split, ...)."""
    module = fn.__module__ or ""
    if fn.__name__.startswith("_"):
        return False  # private helpers (argument checks, dtype logic) are inlined
    return module in ("torch.nn.functional", "torch.functional", "torch._tensor", "torch.nn.init") \
        or module.startswith("torch._refs") or module == "torch"


def _is_torch_op_builtin(fn) -> bool:
    if isinstance(fn, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return getattr(fn, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor)
    return is_torch_library_code(fn) or isinstance(fn, torch._ops.OpOverload) \
        or isinstance(fn, torch._ops.OpOverloadPacket)


def _wrap_tensor(tx, value: torch.Tensor, source):
    cls = type(value)
    if source is None:
        unsupported("a tensor constant that is not reachable from the inputs")
    if cls not in (torch.Tensor, torch.nn.Parameter):
        return _wrap_subclass_tensor(tx, value, source)
    if value.is_sparse or value.layout != torch.strided:
        unsupported("sparse or non-strided tensor input")
    dims = tx.dynamic.tensor_dims(value, source)
    if dims:
        meta, strides = tx.dynamic.symbolic_tensor(tx, value, source, dims)
        tensor_guard(tx, source, value, list(meta.shape), strides)
        node = tx.graph.placeholder(source, value, source.name(), meta=meta)
        node.meta["device"] = value.device
        return TensorVariable(node, meta, value.device, cls=type(value), source=source, real=value)
    tx.guards.tensor(source, value)
    node = tx.graph.placeholder(source, value, source.name())
    return TensorVariable(node, node.meta["val"], value.device, cls=cls, source=source, real=value)


def _wrap_subclass_tensor(tx, value: torch.Tensor, source):
    """An instance of a user subclass: guarded on its type (and on its class's
    ``__torch_function__``); the graph and the metadata guards read a plain alias of it
    (``PlainTensorSource``), so no override runs there."""
    cls = type(value)
    if getattr(cls, "__torch_dispatch__", torch._C._disabled_torch_dispatch_impl) \
            is not torch._C._disabled_torch_dispatch_impl:
        unsupported(f"tensor subclass {cls.__qualname__} with __torch_dispatch__ as an input")
    plain = plain_alias(value)
    if plain.is_sparse or plain.layout != torch.strided:
        unsupported("sparse or non-strided tensor input")
    tx.guards.type_is(source, cls)
    if overrides_torch_function(cls):
        guard_class_entry(tx, cls, "__torch_function__", static_lookup(cls, "__torch_function__"))
    plain_source = PlainTensorSource(source)
    tx.guards.tensor(plain_source, plain)
    node = tx.graph.placeholder(plain_source, plain, source.name())
    return TensorVariable(node, node.meta["val"], plain.device, cls=cls, source=source, real=value)

