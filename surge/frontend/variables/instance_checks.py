"""``isinstance`` and ``issubclass`` with the real semantics of the class's metaclass.

A class whose metaclass keeps ``type.__instancecheck__`` (or ``abc.ABCMeta``'s, which
answers from the object's type) is answered from the variable's Python type, which
its guards fix. A metaclass with its own check decides for itself:

- torch's tensor metaclasses (``torch.FloatTensor``'s ``tensortype`` checks dtype and
  device, ``nn.Parameter``'s its type) are asked about an empty tensor with the
  variable's type, dtype, device and layout, which the graph fixes;
- a ``__instancecheck__`` / ``__subclasscheck__`` written in Python is traced, so what
  it reads of the object is guarded as any other read;
- anything else cannot be known at capture: a graph break, CPython answers.
"""
from __future__ import annotations

import abc
import types

import torch

from .base import unsupported
from .class_attributes import guard_class_entry, guard_mro
from .tensor import TensorVariable

# Metaclasses whose checks answer from the type alone (ABCMeta: the type and its registry).
_TYPE_DETERMINED = (type, abc.ABCMeta)


def isinstance_of(tx, obj, classes) -> bool:
    return any(_instance_check(tx, obj, cls) for cls in classes)


def issubclass_of(tx, cls_var, sub: type, classes) -> bool:
    return any(_subclass_check(tx, cls_var, sub, cls) for cls in classes)


def _hook(cls, name: str):
    """The metaclass's own ``name`` hook, or None where the default (type-based) answer holds."""
    meta = type(cls)
    for klass in meta.__mro__:
        if name in klass.__dict__:
            return None if klass in _TYPE_DETERMINED else klass.__dict__[name]
    return None


def _instance_check(tx, obj, cls) -> bool:
    hook = _hook(cls, "__instancecheck__")
    if hook is None:
        guard_mro(tx, obj.python_type())
        if issubclass(obj.python_type(), cls):
            return True
        claimed = _claimed_class(tx, obj)  # type's and ABCMeta's checks both ask it too
        return claimed is not None and issubclass(claimed, cls)
    if isinstance(obj, TensorVariable) and _is_torch_code(type(cls)):
        example = torch.empty(0, dtype=obj.example.dtype, device=obj.device, layout=obj.example.layout)
        if obj.cls is not torch.Tensor:
            example = example.as_subclass(obj.cls)
        return isinstance(example, cls)
    return _traced_hook(tx, cls, hook, "__instancecheck__", obj)


def _claimed_class(tx, obj):
    """``obj.__class__`` where the object's class defines ``__class__`` itself (a mock with a
    spec, a proxy) and it names another class; None otherwise."""
    from .objects import ObjectVariable, NewObjectVariable

    own = obj.python_type()
    if not isinstance(obj, (ObjectVariable, NewObjectVariable)) or \
            next(k for k in own.__mro__ if "__class__" in k.__dict__) is object:
        return None
    claimed = obj.getattr(tx, "__class__")
    value = getattr(claimed, "cls", None)
    if not isinstance(value, type):
        unsupported(f"isinstance() of a {own.__qualname__} whose __class__ is {claimed}")
    return value if value is not own else None


def _subclass_check(tx, cls_var, sub: type, cls) -> bool:
    hook = _hook(cls, "__subclasscheck__")
    if hook is None or _is_torch_code(type(cls)):  # (torch's: a fixed answer for two classes)
        guard_mro(tx, sub)
        return issubclass(sub, cls)
    return _traced_hook(tx, cls, hook, "__subclasscheck__", cls_var)


def _traced_hook(tx, cls, hook, name: str, arg) -> bool:
    from .functions import UserFunctionVariable
    from .objects import ClassVariable

    if not isinstance(hook, types.FunctionType):
        unsupported(f"{name} of metaclass {type(cls).__qualname__} is not Python code")
    guard_class_entry(tx, type(cls), name, hook)
    result = UserFunctionVariable(hook).call(tx, [ClassVariable(cls), arg], {})
    return bool(result.truthy(tx))


def _is_torch_code(meta: type) -> bool:
    module = getattr(meta, "__module__", "") or ""
    return module == "torch" or module.startswith("torch.")

