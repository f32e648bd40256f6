"""The built-in storage of dict subclasses: reads through ``super()`` on objects from
the inputs, and the full storage of dict-subclass objects the trace creates.

Libraries keep registries in dict subclasses whose methods end in
``super().get(...)``. The object is read from the inputs (type-guarded); each
key read is guarded on its presence in the storage and, when present, the value
is read lazily with its own guards, so other entries of a large registry cost nothing.
Only reads are modelled there: a write through ``super()`` is refused.

An object the trace creates from a dict subclass (``ModelOutput``, an
``OrderedDict`` dataclass) is a ``NewObjectVariable`` with a ``storage``
DictVariable beside its attributes; ``dict``/``OrderedDict`` methods reached
on it (``self.keys()``, ``super().__setitem__(k, v)``) act on that storage.
"""
from __future__ import annotations

import collections

from ..sources import DictStorageSource
from .base import Variable, raise_in_user_code, unsupported
from .constant import NONE, ConstantVariable
from .containers import _key_of

READ_METHODS = ("get", "__getitem__", "__contains__")


class DictStorageMethodVariable(Variable):
    """``dict.<name>`` bound to a dict-subclass object reached from the inputs."""

    def __init__(self, self_var: Variable, name: str):
        self.self_var = self_var
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        if kwargs or not args or not args[0].is_constant():
            unsupported(f"dict.{self.name}() of a {self.self_var.python_type().__qualname__} with a non-constant key")
        key = args[0].as_constant()
        source = self.self_var.source
        present = dict.__contains__(self.self_var.obj, key)
        tx.guards.add(source, f"dict.__contains__({{v}}, {key!r}) is {present}",
                      f"({key!r} in dict storage of {source.name()}) is {present}")
        if self.name == "__contains__":
            return ConstantVariable(present)
        if not present:
            if self.name == "get":
                return args[1] if len(args) > 1 else NONE
            raise_in_user_code(KeyError, repr(key), args=(key,))
        return tx.wrap(dict.__getitem__(self.self_var.obj, key), DictStorageSource(source, key))


def dict_storage_method(self_var: Variable, name: str) -> Variable:
    if name not in READ_METHODS or getattr(self_var, "source", None) is None:
        unsupported(f"super().{name}() of a dict subclass in compiled code")
    return DictStorageMethodVariable(self_var, name)


class StorageMethodVariable(Variable):
    """A ``dict``/``OrderedDict`` method bound to a trace-created dict-subclass object."""

    def __init__(self, self_var, name: str):
        self.self_var = self_var
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        from .container_methods import call_container_method

        storage = self.self_var.storage
        if self.name == "__init__":
            if args or kwargs:
                call_container_method(tx, storage, "update", list(args), dict(kwargs))
            return NONE
        if self.name == "__setitem__":
            key, value = args
            storage.items[_key_of(tx, key)] = value
            return NONE
        if self.name == "__delitem__":
            (key,) = args
            k = _key_of(tx, key)
            if k not in storage.items:
                raise_in_user_code(KeyError, repr(k), args=(k,))
            del storage.items[k]
            return NONE
        if self.name == "__len__":
            return ConstantVariable(len(storage.items))
        if self.name == "__iter__":
            from .containers import IteratorVariable

            return IteratorVariable(storage.iterate(tx))
        if self.name == "copy" and issubclass(self.self_var.cls, collections.OrderedDict):
            from .constructors import construct  # OrderedDict.copy(): ``self.__class__(self)``
            from .objects import ClassVariable

            return construct(tx, ClassVariable(self.self_var.cls), [self.self_var], {})
        return call_container_method(tx, storage, self.name, list(args), dict(kwargs))


def is_dict_storage_class(cls: type) -> bool:
    """Instances are plain dict (or OrderedDict) storage plus a __dict__, made the usual way."""
    return issubclass(cls, dict) and cls.__new__ in (dict.__new__, collections.OrderedDict.__new__) \
        and cls.__dictoffset__ != 0


class InstanceDictVariable(Variable):
    """``obj.__dict__`` of an object read from the inputs, read one key at a time.

    Each key read is guarded on its presence (``key in obj.__dict__``) and its value
    read through ``obj.__dict__[key]``; attributes the trace assigned are seen first.
    """

    def __init__(self, obj_var):
        self.obj_var = obj_var
        self.source = None  # a view: never reconstructed as the real dict

    def python_type(self):
        return dict

    def truthy(self, tx):
        unsupported("truth value of an object's __dict__")

    def getattr(self, tx, name):
        if name in ("get", "__getitem__", "__contains__"):
            return InstanceDictMethod(self, name)
        unsupported(f"__dict__.{name}() of an input object")

    def lookup(self, tx, key):
        stored = tx.side_effects.attribute(self.obj_var.obj, key)
        if stored is not None:
            return stored
        source = self.obj_var.source
        present = key in self.obj_var.obj.__dict__
        tx.guards.add(source, f"({key!r} in {{v}}.__dict__) is {present}",
                      f"({key!r} in {source.name()}.__dict__) is {present}")
        if not present:
            return None
        from ..sources import AttrSource, ItemSource

        return tx.wrap(self.obj_var.obj.__dict__[key], ItemSource(AttrSource(source, "__dict__"), key))

    def contains(self, tx, key) -> bool:
        return self.lookup(tx, key.as_constant()) is not None

    def getitem(self, tx, key):
        value = self.lookup(tx, key.as_constant())
        if value is None:
            raise_in_user_code(KeyError, repr(key.as_constant()), args=(key.as_constant(),))
        return value


class InstanceDictMethod(Variable):
    def __init__(self, view: InstanceDictVariable, name: str):
        self.view = view
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        if kwargs or not args or not args[0].is_constant():
            unsupported(f"__dict__.{self.name}() with a non-constant key")
        value = self.view.lookup(tx, args[0].as_constant())
        if self.name == "__contains__":
            return ConstantVariable(value is not None)
        if value is None:
            if self.name == "get":
                return args[1] if len(args) > 1 else NONE
            raise_in_user_code(KeyError, repr(args[0].as_constant()), args=(args[0].as_constant(),))
        return value
