"""Objects whose class defines ``__hash__`` / ``__eq__`` in Python, as dict keys and set
elements: hashed and compared by their traced methods, as CPython hashes and compares them.

The trace keeps a dict's entries in a Python dict keyed by stand-ins for the keys
(``containers._key_of``): constants as themselves, objects that keep ``object``'s hash by
identity, and objects of such a class as a ``HashedKey``. A ``HashedKey`` carries the hash
the class's ``__hash__`` returned when traced (a constant under the guards its trace
installed: attributes it read, the class entry of ``__hash__``), converted as CPython
converts it, and compares with another key of equal hash by tracing ``==`` between the two
objects, so the entries the trace keeps merge where CPython's merge (equality runs only on
equal hashes, after identity). A ``__hash__`` or ``__eq__`` that is
not Python code, whose result depends on tensor data, or that writes state (the trace
hashes and compares more often than CPython: a dict handed over at a graph break is
rebuilt, and its keys hashed again) is a graph break.
"""
from __future__ import annotations

import contextlib
import types

from .base import Variable, raise_in_user_code, unsupported
from .constant import ConstantVariable


# How often a trace read an order that depends on this process's hashing (a set of strings
# iterated, hash() of a string): a capture that did is not kept on disk (another process
# hashes strings differently, disk_cache.py).
_PROCESS_ORDER_READS = [0]
_SEED_FREE = (int, bool, float, complex, type(None))


def note_order_read(keys) -> None:
    """``keys`` (of a set, in its order) were read in order: counted unless that order is the
    same in every process (numbers only)."""
    if len(keys) > 1 and not all(_seed_free(k) for k in keys):
        _PROCESS_ORDER_READS[0] += 1


def _seed_free(key) -> bool:
    if isinstance(key, (tuple, frozenset)):
        return all(_seed_free(k) for k in key)
    return type(key) in _SEED_FREE


def process_order_reads() -> int:
    return _PROCESS_ORDER_READS[0]


class HashedKey:
    """The stand-in for an object hashed by its class's Python ``__hash__``."""

    __slots__ = ("tx", "variable", "hash_value", "rehashed")

    def __init__(self, tx, variable: Variable, hash_value: int):
        self.tx = tx
        self.variable = variable
        self.hash_value = hash_value
        self.rehashed = False  # checked to hash the same at the end of the trace (check_rebuilt)

    def __hash__(self):
        return self.hash_value

    def __eq__(self, other):
        from ..interpreter.operators import compare_equal
        from .containers import key_variable

        with _without_writes(self.tx, f"{self.variable.python_type().__qualname__}.__eq__"):
            return compare_equal(self.tx, self.variable, key_variable(other))


class _Returns:
    """An object whose ``__hash__`` returns ``value``: ``hash()`` of it converts the value as
    CPython converts any ``__hash__`` result (an int kept or reduced, -1 made -2)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        return self.value


@contextlib.contextmanager
def _without_writes(tx, what: str):
    """A traced ``__hash__`` / ``__eq__`` that writes state (counting its calls, say) is left
    to CPython: the trace may hash or compare a key where CPython does not (the keys of a
    dict handed over at a graph break, rebuilt by CPython and read back by the trace)."""
    before = tx.writes
    yield
    if tx.writes != before:
        unsupported(f"{what} writes state: CPython calls it")


def check_rebuilt(keys) -> None:
    """A dict or set handed to CPython (at a graph break, a return, a replay into an input)
    is built again there, which hashes its keys again: each key's traced hash must still be
    the one it was stored with (an attribute it reads may have changed since, or it may
    raise now), and no key may share its hash with another (CPython would call their
    ``__eq__`` while building)."""
    hashes: dict = {}
    for key in keys:
        if not isinstance(key, HashedKey):
            if not hasattr(key, "variable"):  # a constant (identity keys hash by address)
                hashes.setdefault(hash(key), 0)
                hashes[hash(key)] += 1
            continue
        if not key.rehashed:
            if _python_hash(key.tx, key.variable) != key.hash_value:
                unsupported(f"a {key.variable.python_type().__qualname__} key whose hash changed since it was "
                            "stored, handed to CPython (which would hash it again)")
            key.rehashed = True
        hashes[key.hash_value] = hashes.get(key.hash_value, 0) + 1
    if any(n > 1 for n in hashes.values()) and any(isinstance(k, HashedKey) for k in keys):
        unsupported("a dict or set whose keys share a hash, handed to CPython (which would call their __eq__)")


def _hash_method(tx, var: Variable):
    """The ``__hash__`` of an object of a user class (its MRO entry, guarded); object's
    own for other values (hashed by identity, or constants)."""
    from .objects import NewObjectVariable, UserObjectVariable, dunder_lookup

    if not isinstance(var, (NewObjectVariable, UserObjectVariable)):
        return object.__hash__
    return dunder_lookup(tx, var.python_type(), "__hash__")


def _python_hash(tx, var: Variable) -> int | None:
    """``hash(obj)`` of an object of a user class whose class replaces ``object``'s hash,
    traced (``__hash__ = None`` raises CPython's TypeError); None for other values. (A
    class that keeps object's hash but defines ``__eq__`` hashes by identity: equal hashes
    are one object.)"""
    method = _hash_method(tx, var)
    return None if method is object.__hash__ else _call_hash(tx, var, method)


def key_for_object(tx, var: Variable) -> HashedKey | None:
    """The stand-in key of such an object, or None (identity-hashed values)."""
    value = _python_hash(tx, var)
    return None if value is None else HashedKey(tx, var, value)


def hash_builtin(tx, var: Variable):
    """``hash(obj)`` of such an object, or None."""
    value = _python_hash(tx, var)
    return None if value is None else ConstantVariable(value)


def _call_hash(tx, var: Variable, method) -> int:
    from .objects import bind_class_attribute

    cls = var.python_type()
    if method is None:  # __hash__ = None: a class that defines __eq__ alone, a dataclass
        raise_in_user_code(TypeError, f"unhashable type: '{cls.__name__}'")
    if not isinstance(method, types.FunctionType):
        unsupported(f"hashing a {cls.__qualname__} (its __hash__ is not Python code)")
    with _without_writes(tx, f"{cls.__qualname__}.__hash__"):
        result = bind_class_attribute(tx, var, cls, "__hash__", method).call(tx, [], {})
    if not result.is_constant():
        unsupported(f"{cls.__qualname__}.__hash__ returned {result}, not a constant")
    value = result.as_constant()
    if not isinstance(value, int):
        raise_in_user_code(TypeError, "__hash__ method should return an integer")
    return hash(_Returns(value))
