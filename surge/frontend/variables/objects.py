"""Python objects: nn.Modules, user objects read from inputs, objects built during
the trace (dataclasses, plain classes), classes, ``super()`` and Python modules."""
from __future__ import annotations

import collections
import os
import types

import torch
from torch.distributions.utils import lazy_property

from ..sources import AttrSource, ConstSource, ModuleDictSource
from .autograd_functions import AutogradFunctionApplyVariable
from .attribute_hooks import ModuleGetattrVariable, call_getattr_hook, module_table_lookup, user_getattr_hook
from .base import AttributeMissing, Variable, raise_in_user_code, unsupported
from .class_attributes import class_entry_source_of, guard_class_entry, guard_super_entry, guarded_lookup, is_trusted_class
from .constant import NONE, ConstantVariable
from .module_methods import ALLOWED_MODULE_BASE_METHODS, MODULE_METHOD_RULES, ModuleMethodVariable, ModuleSliceVariable
from .torch_function import DEFAULT_TORCH_FUNCTION, DefaultTorchFunctionVariable
from .exceptions import ExceptionVariable  # noqa: F401  (where the interpreter and rules find it)

_MISSING = object()
_OBJECT_CLASS = object.__dict__["__class__"]  # a class that defines its own (a mock's spec) answers for itself
# Built-in classes whose methods act on a dict subclass's own storage.
DICT_STORAGE_BASES = (dict, collections.OrderedDict)


def static_lookup(cls: type, name: str):
    """The attribute ``name`` as stored on the class (no descriptor call), or _MISSING."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


def dunder_lookup(tx, cls: type, name: str):
    """``static_lookup`` of a special method the trace acts on, found or not, guarded:
    a class that later gains (or loses, or replaces) it recompiles."""
    return guarded_lookup(tx, cls, name, _MISSING)


def is_torch_library_code(fn) -> bool:
    module = getattr(fn, "__module__", "") or ""
    return module == "torch" or module.startswith("torch.")


def _is_bindable(value) -> bool:
    return isinstance(value, (types.FunctionType, staticmethod, classmethod, property)) or (
        hasattr(type(value), "__get__") and not isinstance(value, type))


def bind_class_attribute(tx, self_var: Variable, cls: type, name: str, value):
    """Resolve a class-level attribute found for ``self_var`` (methods bind to it)."""
    from .functions import CACHE_WRAPPER_TYPE, CachedFunctionVariable, UserFunctionVariable, UserMethodVariable

    source = class_entry_source_of(cls, name, value)
    if source is not None and _is_bindable(value):
        tx.guards.identity(source, value)  # plain values are guarded by tx.wrap below
    if isinstance(value, types.FunctionType):
        return UserMethodVariable(UserFunctionVariable(value), self_var)
    if isinstance(value, CACHE_WRAPPER_TYPE) and isinstance(getattr(value, "__wrapped__", None), types.FunctionType):
        # An lru_cache'd method: the wrapper, bound (functions.py: CachedFunctionVariable).
        return UserMethodVariable(CachedFunctionVariable(value), self_var)
    if isinstance(value, staticmethod):
        return tx.wrap(value.__func__, None)
    if isinstance(value, classmethod):
        return UserMethodVariable(UserFunctionVariable(value.__func__), ClassVariable(cls))
    if isinstance(value, property):
        if value.fget is None:
            raise AttributeMissing(name)
        return UserFunctionVariable(value.fget).call(tx, [self_var], {})
    if isinstance(value, lazy_property):
        # Computed on first read and then cached on the instance (torch.distributions).
        result = UserFunctionVariable(value.wrapped).call(tx, [self_var], {})
        if isinstance(self_var, NewObjectVariable):
            self_var.attrs[name] = result
        elif isinstance(self_var, UserObjectVariable):
            # Its setattr on the instance, replayed: the next call reads the cached value.
            self_var.store_attribute(name, result, tx)
        return result
    if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        # A C method (ndarray.sum, ...): loading it is fine, calling it is a graph break.
        from .functions import OpaqueMethodVariable

        return OpaqueMethodVariable(self_var, name, value)
    if hasattr(type(value), "__get__") and not isinstance(value, type):
        unsupported(f"descriptor {type(value).__name__} for attribute {name!r} of {cls.__qualname__}")
    return tx.wrap(value, source)


def call_python_dunder(tx, var: Variable, name: str, args: list):
    """``type(obj).<name>(obj, *args)`` when the object's class implements it in Python
    (``__getitem__`` of a registry, ``__contains__`` of a Mapping); None otherwise."""
    if isinstance(var, UserObjectVariable) and type(var.obj) is os._Environ:
        # Its Mapping methods would read the process environment: modelled in environ.py.
        return var.getattr(tx, name).call(tx, list(args), {})
    if isinstance(var, ObjectVariable) and not isinstance(var, NNModuleVariable):
        cls = type(var.obj)
    elif isinstance(var, NewObjectVariable):
        cls = var.cls
    else:
        return None
    method = dunder_lookup(tx, cls, name)
    if not isinstance(method, types.FunctionType):
        return None
    return bind_class_attribute(tx, var, cls, name, method).call(tx, list(args), {})


class ObjectVariable(Variable):
    """Common attribute lookup for objects whose real Python object is known."""

    obj: object

    def python_type(self):
        return type(self.obj)

    def identity_key(self):
        from .containers import IdentityKey

        return IdentityKey(self, self.obj)

    def child_source(self):
        return self.source

    def instance_dict(self) -> dict:
        return getattr(self.obj, "__dict__", {})

    def getattr(self, tx, name):
        from .environ import environ_method

        modelled = environ_method(self, name) if isinstance(self, UserObjectVariable) else None
        if modelled is not None:
            return modelled
        method = static_lookup(type(self.obj), "__getattribute__") if isinstance(self, NNModuleVariable) \
            else dunder_lookup(tx, type(self.obj), "__getattribute__")
        if isinstance(method, types.FunctionType) and not isinstance(self, NNModuleVariable):
            # The class's own __getattribute__ (a config's attribute aliases) decides; its
            # super().__getattribute__ comes back to generic_getattr.
            return bind_class_attribute(tx, self, type(self.obj), "__getattribute__", method).call(
                tx, [ConstantVariable(name)], {})
        return self.generic_getattr(tx, name)

    def generic_getattr(self, tx, name):
        """``object.__getattribute__``: instance dict, class attributes, descriptors."""
        stored = tx.side_effects.attribute(self.obj, name)
        if stored is not None:
            return stored
        cls = type(self.obj)
        if name == "__class__" and static_lookup(cls, name) is _OBJECT_CLASS:
            # Covered by the type (or identity) guard every object read from the inputs has.
            return ClassVariable(cls)
        if name == "__dict__" and isinstance(self, UserObjectVariable) and self.source is not None \
                and isinstance(getattr(self.obj, "__dict__", None), dict):
            from .dict_storage import InstanceDictVariable

            return InstanceDictVariable(self)
        static = static_lookup(cls, name)
        if static is not _MISSING and (isinstance(static, property) or (
                hasattr(type(static), "__set__") and not isinstance(static, types.FunctionType))):
            if isinstance(static, property):
                return bind_class_attribute(tx, self, cls, name, static)
            if isinstance(static, types.MemberDescriptorType) and self.child_source() and hasattr(self.obj, name):
                return tx.wrap(getattr(self.obj, name), AttrSource(self.child_source(), name))  # a __slots__ entry
            unsupported(f"data descriptor {name!r} of {cls.__qualname__}")
        if name == "__dict__":
            unsupported(f"reading __dict__ of {cls.__qualname__}")
        d = self.instance_dict()
        if name in d:
            src = self.child_source()
            return tx.wrap(d[name], AttrSource(src, name) if src is not None else None)
        if static is not _MISSING:
            if not _is_bindable(static):
                # A class attribute read through the instance: guarded through the
                # instance, so a later instance attribute shadowing it is noticed.
                src = self.child_source()
                return tx.wrap(getattr(self.obj, name), AttrSource(src, name) if src is not None else None)
            src = self.child_source()
            if src is not None and isinstance(getattr(self.obj, "__dict__", None), dict):
                # An instance attribute set later would shadow the class's method.
                tx.guards.add(src, f"{name!r} not in {{v}}.__dict__", f"{src.name()} has no instance attribute {name!r}")
            return bind_class_attribute(tx, self, cls, name, static)
        return self.getattr_fallback(tx, name)

    def setattr(self, tx, name, value):
        method = static_lookup(type(self.obj), "__setattr__") if isinstance(self, NNModuleVariable) \
            else dunder_lookup(tx, type(self.obj), "__setattr__")
        if isinstance(method, types.FunctionType) and not isinstance(self, NNModuleVariable):
            bind_class_attribute(tx, self, type(self.obj), "__setattr__", method).call(
                tx, [ConstantVariable(name), value], {})
            return
        self.store_attribute(name, value, tx)

    def store_attribute(self, name, value, tx=None):
        """``object.__setattr__``: recorded as a side effect on the real object."""
        if self.source is None:
            unsupported(f"setting attribute {name!r} of an object not reachable from the inputs")
        static = static_lookup(type(self.obj), name)
        if static is not _MISSING and hasattr(type(static), "__set__"):
            unsupported(f"assigning data descriptor {name!r} of {type(self.obj).__qualname__}")
        tx.side_effects.store_attribute(self.obj, self.source, name, value)

    def getattr_fallback(self, tx, name):
        dunder_lookup(tx, type(self.obj), "__getattr__")  # found or absent: guarded
        hook = user_getattr_hook(type(self.obj))
        if hook is not None:
            return call_getattr_hook(tx, self, hook, name)
        if static_lookup(type(self.obj), "__getattr__") is not _MISSING:
            unsupported(f"custom __getattr__ of {type(self.obj).__qualname__}")
        raise AttributeMissing(name)

    def truthy(self, tx):
        cls = type(self.obj)
        from .object_protocols import python_truth

        found = python_truth(tx, self, cls)
        if found is not None:
            return found
        if dunder_lookup(tx, cls, "__bool__") is not _MISSING or dunder_lookup(tx, cls, "__len__") is not _MISSING:
            unsupported(f"truth value of a {cls.__qualname__} (it defines __bool__ or __len__)")
        return True

    def length(self, tx):
        from .object_protocols import length_result

        found = call_python_dunder(tx, self, "__len__", [])
        if found is not None:
            return length_result(found)
        return super().length(tx)

    def call(self, tx, args, kwargs):
        call = dunder_lookup(tx, type(self.obj), "__call__")
        if isinstance(call, types.FunctionType):
            return bind_class_attribute(tx, self, type(self.obj), "__call__", call).call(tx, args, kwargs)
        unsupported(f"calling a {type(self.obj).__qualname__} object")


class UserObjectVariable(ObjectVariable):
    """An object read from the inputs; guarded on its type, attributes guarded as read."""

    def __init__(self, obj, source):
        self.obj = obj
        self.source = source


class NNModuleVariable(ObjectVariable):
    """An nn.Module, its attributes read through a constant.

    Identity-guarded unless ``by_type`` (a module made per call: guarded by type and by
    the attributes read). An identity-guarded entry binds that constant to the call's own
    module and checks it is alike (``codegen.module_bindings``): modules of one class
    share entries. So whatever the trace reads of the instance (attributes, table keys)
    is guarded as read."""

    def __init__(self, module: torch.nn.Module, source, by_type: bool = False):
        self.obj = module
        self.source = source
        self.by_type = by_type

    @property
    def module(self):
        return self.obj

    def child_source(self):
        if self.source is None or self.by_type:
            return self.source
        return ConstSource(self.obj, self.source.name())

    def getattr_fallback(self, tx, name):
        # Python calls the class's own __getattr__ first; it reaches the tables through
        # super().__getattr__ (ModuleGetattrVariable).
        hook = user_getattr_hook(type(self.obj))
        if hook is not None:
            return call_getattr_hook(tx, self, hook, name)
        if static_lookup(type(self.obj), "__getattr__") is not static_lookup(torch.nn.Module, "__getattr__"):
            unsupported(f"custom __getattr__ of {type(self.obj).__qualname__}")
        return module_table_lookup(tx, self, name)

    def getattr(self, tx, name):
        stored = tx.side_effects.attribute(self.obj, name)
        if stored is not None:
            return stored
        static = static_lookup(type(self.obj), name)
        rule = MODULE_METHOD_RULES.get(name)
        if rule is not None and static is static_lookup(torch.nn.Module, name) and name not in self.obj.__dict__:
            return ModuleMethodVariable(self, name, rule)
        if (isinstance(static, types.FunctionType) and static.__qualname__.startswith("Module.")
                and name not in ALLOWED_MODULE_BASE_METHODS):
            unsupported(f"nn.Module.{name}() in compiled code")
        return super().getattr(tx, name)

    def guard_members(self, tx, table: str = "_modules") -> None:
        """Iterating, len() or indexing a container module depends on its member names."""
        src = self.child_source()
        if src is not None:
            keys = tuple(self.obj.__dict__[table])
            tx.guards.add(src, f"tuple({{v}}.{table}) == {keys!r}", f"{src.name()}.{table} keys == {list(keys)}")

    def submodules(self, tx) -> list:
        self.guard_members(tx)
        src = self.child_source()
        return [tx.wrap(m, ModuleDictSource(src, "_modules", k) if src is not None else None)
                for k, m in self.obj._modules.items() if m is not None]

    def iterate(self, tx):
        if isinstance(self.obj, torch.nn.ModuleDict):
            self.guard_members(tx)
            return [ConstantVariable(k) for k in self.obj._modules]
        if isinstance(self.obj, (torch.nn.ModuleList, torch.nn.Sequential)):
            return self.submodules(tx)
        if isinstance(self.obj, (torch.nn.ParameterList,)):
            self.guard_members(tx, "_parameters")
            return [self.getattr(tx, k) for k in self.obj._parameters]
        unsupported(f"iterating over {type(self.obj).__qualname__}")

    def length(self, tx):
        if isinstance(self.obj, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)):
            self.guard_members(tx)
            return len(self.obj._modules)
        if isinstance(self.obj, torch.nn.ParameterList):
            self.guard_members(tx, "_parameters")
            return len(self.obj._parameters)
        unsupported(f"len() of {type(self.obj).__qualname__}")

    def truthy(self, tx):
        if isinstance(self.obj, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)):
            return self.length(tx) > 0
        return True

    def getitem(self, tx, index: Variable):
        key = index.as_constant()
        if isinstance(self.obj, torch.nn.ModuleDict):
            return self.getattr_fallback(tx, key)
        if isinstance(self.obj, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ParameterList)):
            items = self.iterate(tx)
            if isinstance(key, slice):
                return ModuleSliceVariable(items[key])
            return items[key]
        unsupported(f"indexing {type(self.obj).__qualname__}")

    def call(self, tx, args, kwargs):
        module = self.obj
        if torch.nn.modules.module._global_forward_hooks or torch.nn.modules.module._global_forward_pre_hooks:
            unsupported("global nn.Module forward hooks are registered")
        if module._backward_hooks or module._backward_pre_hooks or torch.nn.modules.module._global_backward_hooks \
                or torch.nn.modules.module._global_backward_pre_hooks:
            # torch's own __call__ wires them into autograd: the call runs in CPython.
            unsupported(f"calling {type(module).__qualname__}, which has backward hooks")
        if module._forward_hooks_with_kwargs or module._forward_pre_hooks_with_kwargs \
                or getattr(module, "_forward_hooks_always_called", None):
            unsupported("module forward hooks with kwargs or always_call")
        if self.source is not None:
            tx.guards.hooks(self.child_source(), tuple(module._forward_pre_hooks.values()),
                            tuple(module._forward_hooks.values()))
        elif module._forward_hooks or module._forward_pre_hooks:
            unsupported("calling a module with forward hooks that is not reachable from the inputs")
        from .containers import TupleVariable

        # nn.Module.__call__'s order: pre-hooks may replace the inputs, forward runs,
        # hooks may replace the output.
        for hook in module._forward_pre_hooks.values():
            result = tx.wrap(hook, ConstSource(hook, "forward_pre_hook")).call(tx, [self, TupleVariable(list(args))], {})
            if not (result.is_constant() and result.as_constant() is None):
                args = result.iterate(tx) if isinstance(result, TupleVariable) else [result]
        output = self.call_forward(tx, args, kwargs)
        for hook in module._forward_hooks.values():
            result = tx.wrap(hook, ConstSource(hook, "forward_hook")).call(
                tx, [self, TupleVariable(list(args)), output], {})
            if not (result.is_constant() and result.as_constant() is None):
                output = result
        return output

    def call_forward(self, tx, args, kwargs):
        if "forward" in self.obj.__dict__:
            return tx.wrap(self.obj.__dict__["forward"], AttrSource(self.child_source(), "forward")
                           if self.source is not None else None).call(tx, args, kwargs)
        forward = static_lookup(type(self.obj), "forward")
        if not isinstance(forward, types.FunctionType):
            unsupported(f"{type(self.obj).__qualname__} has no Python forward")
        return bind_class_attribute(tx, self, type(self.obj), "forward", forward).call(tx, args, kwargs)

    def __repr__(self):
        return f"NNModuleVariable({type(self.obj).__qualname__})"


def static_owner(cls: type, name: str):
    """The class of ``cls.__mro__`` whose __dict__ defines ``name``, or None."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass
    return None


class NewObjectVariable(Variable):
    """An object of a user class created during the trace (dataclasses and plain classes).

    For a dict subclass (``ModelOutput``-style OrderedDict dataclasses), ``storage``
    holds the dict's own items beside the instance attributes.
    """

    def __init__(self, cls: type, storage=None):
        self.cls = cls
        self.attrs: dict[str, Variable] = {}
        self.storage = storage
        if storage is not None:  # a view or proxy of the storage is rebuilt over this object
            storage.owner = self

    def python_type(self):
        return self.cls

    def identity_key(self):
        from .containers import IdentityKey

        return IdentityKey(self, self)  # one variable per object the trace made

    def truthy(self, tx):
        from .object_protocols import python_truth

        found = python_truth(tx, self, self.cls)
        if found is not None:
            return found
        if self.storage is not None and dunder_lookup(tx, self.cls, "__bool__") is _MISSING:
            return bool(self.storage.items)
        return True

    def iterate(self, tx):
        return self.make_iterator(tx).iterate(tx)

    def make_iterator(self, tx):
        """``iter(obj)``: what its class's ``__iter__`` returns (a generator runs lazily, so
        it sees later changes of what it walks), or its dict storage's iterator."""
        from .containers import BaseSequenceVariable, DictVariable, IteratorVariable, SetVariable
        from .iterators import iterator_of

        method = dunder_lookup(tx, self.cls, "__iter__")
        if self.storage is not None and not isinstance(method, types.FunctionType):
            return iterator_of(tx, self.storage)
        if isinstance(method, types.FunctionType):
            iterator = bind_class_attribute(tx, self, self.cls, "__iter__", method).call(tx, [], {})
            if isinstance(iterator, NewObjectVariable):  # its own iterator (or another object's): __next__ runs
                unsupported(f"iterating over {self}, an iterator written in Python")
            if isinstance(iterator, IteratorVariable):
                return iterator
            if iterator.is_constant() or isinstance(iterator, (BaseSequenceVariable, DictVariable, SetVariable)):
                raise_in_user_code(TypeError, f"iter() returned non-iterator of type "
                                              f"'{iterator.python_type().__name__}'")
            unsupported(f"iterating over {self}: its __iter__ returned {iterator}")
        unsupported(f"iterating over {self}")

    def length(self, tx):
        method = dunder_lookup(tx, self.cls, "__len__")
        if isinstance(method, types.FunctionType):
            from .object_protocols import length_result

            return length_result(bind_class_attribute(tx, self, self.cls, "__len__", method).call(tx, [], {}))
        if self.storage is not None:
            return len(self.storage.items)
        unsupported(f"len() of {self}")

    def getattr(self, tx, name):
        method = dunder_lookup(tx, self.cls, "__getattribute__")
        if isinstance(method, types.FunctionType):
            return bind_class_attribute(tx, self, self.cls, "__getattribute__", method).call(
                tx, [ConstantVariable(name)], {})
        return self.generic_getattr(tx, name)

    def generic_getattr(self, tx, name):
        static = static_lookup(self.cls, name)
        if isinstance(static, property):
            return bind_class_attribute(tx, self, self.cls, name, static)
        if name in self.attrs:
            return self.attrs[name]
        if name == "__class__" and static is _OBJECT_CLASS:
            return ClassVariable(self.cls)
        if name == "__dict__":
            from .containers import DictVariable

            view = DictVariable({})
            view.items = self.attrs  # the same dict: writes through it are attribute writes
            return view
        if self.storage is not None and static_owner(self.cls, name) in DICT_STORAGE_BASES:
            from .dict_storage import StorageMethodVariable

            return StorageMethodVariable(self, name)
        if static is not _MISSING:
            return bind_class_attribute(tx, self, self.cls, name, static)
        hook = dunder_lookup(tx, self.cls, "__getattr__")  # found or absent: guarded
        if isinstance(hook, types.FunctionType):
            from .base import RaisedInUserCode

            try:  # Python calls it when normal lookup fails; its AttributeError is "missing"
                return bind_class_attribute(tx, self, self.cls, "__getattr__", hook).call(
                    tx, [ConstantVariable(name)], {})
            except RaisedInUserCode as e:
                if issubclass(e.exc_type, AttributeError):
                    raise AttributeMissing(name) from None
                raise
        raise AttributeMissing(name)

    def setattr(self, tx, name, value):
        method = dunder_lookup(tx, self.cls, "__setattr__")
        if isinstance(method, types.FunctionType):
            # The class's own __setattr__ runs (it may mirror fields into dict storage).
            bind_class_attribute(tx, self, self.cls, "__setattr__", method).call(tx, [ConstantVariable(name), value], {})
            return
        self.store_attribute(name, value)

    def delattr(self, tx, name):
        method = dunder_lookup(tx, self.cls, "__delattr__")
        if isinstance(method, types.FunctionType):
            bind_class_attribute(tx, self, self.cls, "__delattr__", method).call(tx, [ConstantVariable(name)], {})
            return
        if name not in self.attrs:
            raise_in_user_code(AttributeError, name)
        del self.attrs[name]

    def store_attribute(self, name, value, tx=None):
        """``object.__setattr__``: the instance __dict__, past any class __setattr__."""
        static = static_lookup(self.cls, name)
        if static is not _MISSING and hasattr(type(static), "__set__"):
            unsupported(f"assigning data descriptor {name!r} of {self.cls.__qualname__}")
        self.attrs[name] = value

    def call(self, tx, args, kwargs):
        call = dunder_lookup(tx, self.cls, "__call__")
        if not isinstance(call, types.FunctionType):
            unsupported(f"calling a {self.cls.__qualname__} object")
        return bind_class_attribute(tx, self, self.cls, "__call__", call).call(tx, args, kwargs)

    def __repr__(self):
        return f"NewObjectVariable({self.cls.__qualname__})"


class ClassVariable(Variable):
    def __init__(self, cls: type, source=None):
        self.cls = cls
        self.source = source

    def python_type(self):
        return type(self.cls)

    def truthy(self, tx):
        return True

    def identity_key(self):
        from .containers import IdentityKey

        return IdentityKey(self, self.cls)

    def is_constant(self):
        return False

    def getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(self.cls, name))
        if name == "__subclasses__" and static_lookup(type(self.cls), name) is type.__dict__[name]:
            from .class_methods import SubclassesMethodVariable

            return SubclassesMethodVariable(self)
        static = static_lookup(self.cls, name)
        if static is _MISSING:
            raise AttributeMissing(name)
        if name == "apply" and issubclass(self.cls, torch.autograd.Function):
            return AutogradFunctionApplyVariable(self.cls)
        if static is DEFAULT_TORCH_FUNCTION:
            guard_class_entry(tx, self.cls, name, static)
            return DefaultTorchFunctionVariable(self.cls)
        if isinstance(static, (classmethod, staticmethod, types.FunctionType)):
            guard_class_entry(tx, self.cls, name, static)
        if isinstance(static, classmethod):
            from .functions import UserFunctionVariable, UserMethodVariable

            return UserMethodVariable(UserFunctionVariable(static.__func__), self)
        if isinstance(static, staticmethod):
            return tx.wrap(static.__func__, None)
        if isinstance(static, types.FunctionType):
            from .functions import UserFunctionVariable

            return UserFunctionVariable(static)
        # Read as Python reads it (descriptors called); guarded however the class was
        # reached (a global, ``type(obj)``, ``obj.__class__``).
        own_source = AttrSource(ConstSource(self.cls, self.cls.__qualname__), name) \
            if not is_trusted_class(self.cls) else None
        return tx.wrap(getattr(self.cls, name), own_source)

    def call(self, tx, args, kwargs):
        from .constructors import construct

        return construct(tx, self, args, kwargs)

    def __repr__(self):
        return f"ClassVariable({self.cls.__qualname__})"


class SuperVariable(Variable):
    def __init__(self, cls: type, self_var: Variable):
        self.cls = cls
        self.self_var = self_var

    def getattr(self, tx, name):
        if isinstance(self.self_var, ClassVariable):
            from .class_methods import super_class_attribute

            return super_class_attribute(tx, self, name)
        obj_type = self.self_var.python_type()
        mro = obj_type.__mro__
        start = mro.index(self.cls) + 1 if self.cls in mro else 0
        for klass in mro[start:]:
            if name in klass.__dict__:
                value = klass.__dict__[name]
                if value is DEFAULT_TORCH_FUNCTION:
                    return DefaultTorchFunctionVariable(obj_type)
                if klass is object and name == "__init__":
                    return NoOpVariable()
                if name == "__init__" and isinstance(self.self_var, ExceptionVariable) \
                        and klass.__module__ == "builtins":
                    from .exceptions import ExceptionInitVariable

                    return ExceptionInitVariable(self.self_var)
                if klass is dict and isinstance(self.self_var, UserObjectVariable):
                    from .dict_storage import dict_storage_method

                    return dict_storage_method(self.self_var, name)
                if isinstance(self.self_var, NewObjectVariable) and self.self_var.storage is not None \
                        and klass in DICT_STORAGE_BASES:
                    from .dict_storage import StorageMethodVariable

                    return StorageMethodVariable(self.self_var, name)
                if klass is object and name in ("__setattr__", "__getattribute__") \
                        and isinstance(self.self_var, (NewObjectVariable, UserObjectVariable)):
                    return ObjectSlotVariable(self.self_var, name)
                if klass is torch.nn.Module and name == "__getattr__" and isinstance(self.self_var, NNModuleVariable):
                    return ModuleGetattrVariable(self.self_var)
                if klass is torch.nn.Module and hasattr(self.self_var, "module_base_method"):
                    return self.self_var.module_base_method(tx, name)  # a module built in the frame
                if isinstance(value, types.FunctionType) and value.__qualname__.startswith("Module.") \
                        and name != "forward":
                    unsupported(f"super().{name}() of nn.Module in compiled code")
                guard_super_entry(tx, obj_type, self.cls, name, value)
                return bind_class_attribute(tx, self.self_var, obj_type, name, value)
        raise AttributeMissing(name)


class WeakRefVariable(Variable):
    """A ``weakref.ref`` read from the inputs; calling it reads its referent."""

    def __init__(self, ref, source):
        self.ref = ref
        self.source = source

    def python_type(self):
        return type(self.ref)

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        from ..sources import CallSource

        return tx.wrap(self.ref(), CallSource(self.source))


class ObjectSlotVariable(Variable):
    """``object.__setattr__`` / ``object.__getattribute__`` bound to an object
    (``super().__setattr__(k, v)`` inside a class that overrides it)."""

    def __init__(self, self_var, name: str):
        self.self_var = self_var
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        if self.name == "__getattribute__":
            (name,) = args
            return self.self_var.generic_getattr(tx, name.as_constant())
        name, value = args
        self.self_var.store_attribute(name.as_constant(), value, tx)
        return NONE


class NoOpVariable(Variable):
    """A call that does nothing (``object.__init__``)."""

    def call(self, tx, args, kwargs):
        return NONE


class PythonModuleVariable(Variable):
    def __init__(self, module: types.ModuleType, source=None):
        self.module = module
        self.source = source

    def python_type(self):
        return types.ModuleType

    def truthy(self, tx):
        return True

    def getattr(self, tx, name):
        hook = self.module.__dict__.get("__getattr__")
        if name not in self.module.__dict__ and isinstance(hook, types.FunctionType) \
                and self.module.__name__.split(".")[0] not in TRUSTED_MODULES:
            # Library modules' hooks (lazy submodule imports) run for real below.
            return self.call_module_getattr(tx, hook, name)
        try:
            value = getattr(self.module, name)
        except AttributeError:
            raise AttributeMissing(name)
        # Library modules are trusted not to be rebound between calls; attributes of
        # the user's own modules (config modules, ...) are guarded like globals.
        trusted = self.module.__name__.split(".")[0] in TRUSTED_MODULES
        source = None if trusted or self.source is None else AttrSource(ConstSource(self.module, self.module.__name__), name)
        return tx.wrap(value, source)


    def call_module_getattr(self, tx, hook, name):
        """A module-level ``__getattr__`` (PEP 562), traced when ``name`` is not a global of
        the module; that absence and the hook's identity are guarded."""
        from .base import RaisedInUserCode
        from .functions import UserFunctionVariable

        if self.source is not None:
            module_source = ConstSource(self.module, self.module.__name__)
            tx.guards.add(module_source, f"{name!r} not in {{v}}.__dict__",
                          f"module {self.module.__name__} has no global {name!r}")
            tx.guards.identity(AttrSource(module_source, "__getattr__"), hook)
        try:
            return UserFunctionVariable(hook).call(tx, [ConstantVariable(name)], {})
        except RaisedInUserCode as e:
            if issubclass(e.exc_type, AttributeError):
                raise AttributeMissing(name) from None
            raise


TRUSTED_MODULES = {"torch", "math", "operator", "functools", "itertools", "collections", "typing",
                   "dataclasses", "builtins", "numpy", "enum", "types", "warnings", "inspect", "surge"}

