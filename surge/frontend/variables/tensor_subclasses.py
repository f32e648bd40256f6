"""Instances of user subclasses of ``torch.Tensor`` as graph values.

A ``TensorVariable`` whose ``cls`` is a user subclass is still one graph value; what
the class adds is Python: methods, properties and class attributes found on the
class (guarded on their MRO entry, as for any object), attributes of the instance
(``self.tag = ...`` in ``__init__``: kept on the variable for instances the trace
makes, read through the input and guarded for inputs, written back as side effects),
and construction (``MyTensor(t)``, a Python ``__new__`` calling
``torch.Tensor._make_subclass`` or ``super().__new__``). Properties of
``torch.Tensor`` itself go through the class's ``__torch_function__`` when it has
one (``torch_function.py``).
"""
from __future__ import annotations

import types

import torch

from ..sources import AttrSource
from .base import Variable, raise_in_user_code, unsupported

PLAIN_TENSOR_CLASSES = (torch.Tensor, torch.nn.Parameter)
# Classes whose attributes are torch's own (answered by the tensor rules).
_TORCH_BASES = (torch.Tensor, torch._C.TensorBase, torch.nn.Parameter, object)
_ABSENT = object()


def _user_entry(cls: type, name: str):
    """(owner, value) of the first class of the MRO defining ``name``, or (None, _ABSENT)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass, klass.__dict__[name]
    return None, _ABSENT


def _instance_attribute(tx, tensor, name: str):
    if name in tensor.attrs:
        return tensor.attrs[name]
    if tensor.real is not None and tensor.source is not None:
        stored = tx.side_effects.attribute(tensor.real, name)
        if stored is not None:
            return stored
        d = tensor.real.__dict__
        if name in d:
            return tx.wrap(d[name], AttrSource(tensor.source, name))
        tx.guards.add(tensor.source, f"{name!r} not in {{v}}.__dict__",
                      f"{tensor.source.name()} has no instance attribute {name!r}")
    return None


def subclass_getattr(tx, tensor, name: str) -> Variable | None:
    """``tensor.name`` as Python finds it on a subclass instance; None when it is one of
    torch's tensor attributes (the tensor rules answer it)."""
    from .class_attributes import guard_class_entry
    from .objects import bind_class_attribute
    from .torch_function import dispatch_property

    if name == "__class__":
        return None
    owner, value = _user_entry(tensor.cls, name)
    if owner is not None and owner not in _TORCH_BASES:
        is_data = hasattr(type(value), "__set__") and not isinstance(value, types.FunctionType)
        if not is_data:
            found = _instance_attribute(tx, tensor, name)
            if found is not None:
                return found
        return bind_class_attribute(tx, tensor, tensor.cls, name, value)
    if owner is None:
        found = _instance_attribute(tx, tensor, name)
        if found is not None:
            return found
        return None  # AttributeMissing from the tensor rules
    guard_class_entry(tx, tensor.cls, name, value)
    return dispatch_property(tx, tensor, name)


def subclass_setattr(tx, tensor, name: str, value: Variable) -> None:
    if tensor.cls in PLAIN_TENSOR_CLASSES:
        unsupported(f"setting attribute {name!r} of a tensor in compiled code")
    owner, static = _user_entry(tensor.cls, name)
    if owner is not None and hasattr(type(static), "__set__"):
        unsupported(f"assigning data descriptor {name!r} of {tensor.cls.__qualname__}")
    if tensor.real is not None and tensor.source is not None:
        tx.side_effects.store_attribute(tensor.real, tensor.source, name, value)
        return
    tensor.attrs[name] = value


# ---- construction --------------------------------------------------------------


def construct_subclass(tx, cls: type, args: list, kwargs: dict):
    """``cls(*args)`` for a subclass of torch.Tensor: its Python ``__new__`` (or
    torch's, which makes an alias of one tensor argument), then its Python ``__init__``."""
    from .functions import UserFunctionVariable
    from .objects import ClassVariable, bind_class_attribute
    from .tensor import TensorVariable

    if issubclass(cls, torch.nn.Parameter):
        unsupported(f"constructing {cls.__qualname__} (a Parameter) in compiled code")
    new = _user_entry(cls, "__new__")[1]
    if isinstance(new, staticmethod):
        new = new.__func__
    if isinstance(new, types.FunctionType):
        from .class_attributes import guard_class_entry

        guard_class_entry(tx, cls, "__new__", _user_entry(cls, "__new__")[1])
        obj = UserFunctionVariable(new).call(tx, [ClassVariable(cls), *args], kwargs)
    elif new is torch._C.TensorBase.__dict__["__new__"]:
        obj = tensor_new(tx, ClassVariable(cls), *args, **kwargs)
    else:
        unsupported(f"constructing {cls.__qualname__} (its __new__ is not Python code)")
    init = _user_entry(cls, "__init__")[1]
    if isinstance(obj, TensorVariable) and issubclass(obj.cls, cls) and isinstance(init, types.FunctionType):
        bind_class_attribute(tx, obj, cls, "__init__", init).call(tx, list(args), dict(kwargs))
    return obj


def tensor_new(tx, cls_var, *args, **kwargs):
    """``torch.Tensor.__new__(cls, t)``: an alias of ``t`` of class ``cls`` (its autograd
    history kept). Other forms (sizes, data) are not modelled."""
    from .tensor import TensorVariable
    from .torch_function import as_subclass

    if len(args) != 1 or kwargs or not isinstance(args[0], TensorVariable):
        unsupported(f"torch.Tensor.__new__ with {args} {kwargs} (only one tensor argument is modelled)")
    return as_subclass(tx, args[0], cls_var.cls)


def make_subclass(tx, cls_var, data, require_grad=None, **kwargs):
    """``torch.Tensor._make_subclass(cls, data, require_grad=False)``: ``data`` detached,
    as ``cls``."""
    from .tensor import TensorVariable, record_plain_op

    requires = require_grad.as_constant() if require_grad is not None else False
    if kwargs or not isinstance(data, TensorVariable):
        unsupported("torch.Tensor._make_subclass with arguments other than (cls, tensor, require_grad)")
    if requires:
        unsupported("torch.Tensor._make_subclass(..., require_grad=True): a new leaf inside compiled code")
    detached = record_plain_op(tx, "call_method", "detach", [data], {})
    return TensorVariable(detached.node, detached.example, detached.device, cls=cls_var.cls)


def as_subclass_method(tx, tensor, args, kwargs):
    from .torch_function import as_subclass

    cls = (list(args) + list(kwargs.values()))[0]
    if not hasattr(cls, "cls") or not isinstance(cls.cls, type):
        raise_in_user_code(TypeError, "as_subclass(): argument 'cls' must be a type")
    return as_subclass(tx, tensor, cls.cls)


# ---- rebuilding instances in generated code ----------------------------------------


def rewrap(tensor: torch.Tensor, cls: type, attrs: dict):
    """What an entry returns for a subclass instance the graph computed: the plain
    output as ``cls`` with the instance attributes the trace gave it."""
    obj = torch._C.TensorBase.as_subclass(tensor, cls)
    if attrs:
        obj.__dict__.update(attrs)
    return obj


def plain_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A subclass input as the graph sees it: a plain tensor over the same data and
    autograd history (the graph runs no ``__torch_function__``)."""
    return torch._C.TensorBase.as_subclass(tensor, torch.Tensor)
