"""Guards for attributes found on a class rather than on the object itself.

A method, property or class attribute is looked up along the class's MRO at capture
time; a later ``Klass.K = ...``, ``Klass.method = ...`` or a subclass defining the name
changes what the same code reads. Such reads are guarded on the MRO entry they found
(``class_entry(Klass, name)``), whether the object came from the inputs or was
created inside the frame (whose class is then the only thing the guard can check).
Classes that cannot change (builtins, extension types) and torch's own classes (trusted,
as torch's modules are) get no guard.
"""
from __future__ import annotations

from ..sources import ClassEntrySource, ConstSource, SuperEntrySource, class_entry, class_has

_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: its __dict__ cannot be assigned to


def is_trusted_class(cls: type) -> bool:
    """A class whose attributes are not guarded: it cannot change, or it is torch's."""
    module = getattr(cls, "__module__", "") or ""
    return bool(cls.__flags__ & _IMMUTABLE_TYPE) or module == "torch" or module.startswith("torch.")


def class_source(cls: type):
    """The class itself as a guard source, or None when ``cls`` is trusted."""
    return None if is_trusted_class(cls) else ConstSource(cls, cls.__qualname__)


def class_entry_source(cls: type, name: str):
    """The source reading ``name`` from ``cls``'s MRO, or None when ``cls`` is trusted."""
    source = class_source(cls)
    return None if source is None else ClassEntrySource(source, name)


def class_entry_source_of(cls: type, name: str, value):
    """The source at which the MRO of ``cls`` finds ``value`` as ``name``. A ``super()``
    lookup finds it in a later class of the MRO than the first: that class is read."""
    try:
        first = class_entry(cls, name)
    except AttributeError:
        first = None
    if first is not value:
        owner = next((k for k in cls.__mro__ if k.__dict__.get(name, _ABSENT) is value), None)
        if owner is None:
            return None
        cls = owner
    return class_entry_source(cls, name)


def guard_class_entry(tx, cls: type, name: str, value) -> None:
    """The trace used ``value``, found as ``name`` along ``cls``'s MRO: guard that the
    lookup finds the same object on later calls."""
    source = class_entry_source_of(cls, name, value)
    if source is not None:
        tx.guards.identity(source, value)



def guarded_lookup(tx, cls: type, name: str, missing):
    """``name`` along ``cls``'s MRO (no descriptor call), or ``missing``; what was found
    is guarded, and so is finding nothing: a class that later gains a ``__bool__``,
    ``__len__``, ``__eq__`` or operator the capture found absent recompiles."""
    value = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), missing)
    source = class_source(cls)
    if source is None:
        return value
    if value is missing:
        ref = tx.guards.consts.ref(class_has, "class_has")
        tx.guards.add(source, f"not {ref}({{v}}, {name!r})", f"{cls.__qualname__} defines no {name!r} along its MRO")
    else:
        tx.guards.identity(ClassEntrySource(source, name), value)
    return value


def guard_super_entry(tx, cls: type, after: type, name: str, value) -> None:
    """``super(after, obj).name`` found ``value`` for an instance of ``cls``: guarded on
    the lookup itself (the MRO from ``after`` on), not only on the class that held it."""
    source = class_source(cls)
    if source is not None:
        tx.guards.identity(SuperEntrySource(source, after, name), value)


def guard_mro(tx, cls: type) -> None:
    """An answer computed from ``cls.__mro__`` (``isinstance``, ``issubclass``): guarded on
    the MRO itself, which ``__bases__`` reassignment changes."""
    source = class_source(cls)
    if source is not None:
        refs = "".join(tx.guards.consts.ref(k, k.__name__) + ", " for k in cls.__mro__)
        tx.guards.add(source, f"{{v}}.__mro__ == ({refs})",
                      f"{cls.__qualname__}.__mro__ is {tuple(k.__qualname__ for k in cls.__mro__)}")


_ABSENT = object()
