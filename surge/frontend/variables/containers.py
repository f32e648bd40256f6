"""Tuples, lists, dicts, sets, slices and iterators of symbolic values.

Containers created during the trace are mutable here (``append``, item
assignment, ...). Containers read from the call's inputs are guarded on their
type and length (or keys) and are read-only: mutating them is a side effect
the next issue captures.
"""
from __future__ import annotations

import collections
import operator
import types

import torch

from .base import AttributeMissing, Variable, raise_in_user_code, unsupported
from .constant import ConstantVariable
from .hashing import HashedKey, key_for_object, note_order_read


def _key_of(tx, var: Variable):
    """A Python key for a dict/set entry: constants as themselves, objects by identity, and
    objects whose class defines ``__hash__`` by their traced hash and ``==`` (hashing.py)."""
    if var.is_constant():
        return var.as_constant()
    key = getattr(var, "identity_key", None)
    if key is not None:
        hashed = key_for_object(tx, var)
        if hashed is not None:
            return hashed
        key = key()
        if key.obj is not var and getattr(var, "source", None) is not None:
            tx.note_identity(var, key.obj)
        return key
    unsupported(f"using {var} as a dict key or set element")


_ABSENT = object()


class BaseSequenceVariable(Variable):
    python_cls: type = tuple

    def __init__(self, items: list, source=None):
        self.items = list(items)
        self.source = source

    def truthy(self, tx):
        return bool(self.items)

    def iterate(self, tx):
        return list(self.items)

    def make_iterator(self, tx):
        from .iterators import SequenceIterator

        return SequenceIterator(tx, self)

    def length(self, tx):
        return len(self.items)

    def is_constant(self):
        return all(i.is_constant() for i in self.items)

    def as_constant(self):
        return self.python_type()(i.as_constant() for i in self.items)

    def getitem(self, tx, index: Variable):
        key = index.as_constant()
        if isinstance(key, slice):
            return self.rebuild(self.items[key])
        try:
            return self.items[operator.index(key)]
        except (IndexError, TypeError):
            # CPython's own error: the same index into a sequence of the same kind and length.
            kind = tuple if issubclass(self.python_type(), tuple) else list
            try:
                kind(range(len(self.items)))[key]
            except (IndexError, TypeError) as e:
                raise_in_user_code(type(e), str(e))
            raise

    def rebuild(self, items):
        return type(self)(items)

    def index_of(self, tx, value):
        from ..interpreter.operators import compare_equal

        for i, item in enumerate(self.items):
            if compare_equal(tx, item, value):
                return i
        return None


class TupleVariable(BaseSequenceVariable):
    def __init__(self, items, cls=None, source=None):
        super().__init__(items, source)
        self.cls = cls  # a namedtuple or structseq class, or None for a plain tuple

    def python_type(self):
        return self.cls or tuple

    def rebuild(self, items):
        return TupleVariable(items)

    def as_constant(self):
        values = tuple(i.as_constant() for i in self.items)
        return values if self.cls is None else self._make(values)

    def _make(self, values):
        if hasattr(self.cls, "_make"):
            return self.cls._make(values)
        return self.cls(values)

    def getattr(self, tx, name):
        fields = getattr(self.cls, "_fields", None) or getattr(self.cls, "__match_args__", None)
        if fields and name in fields:
            return self.items[fields.index(name)]
        if name in ("count", "index"):
            from .functions import ContainerMethodVariable

            return ContainerMethodVariable(self, name)
        if self.cls is not None and hasattr(self.cls, name):
            from .objects import bind_class_attribute, static_lookup

            return bind_class_attribute(tx, self, self.cls, name, static_lookup(self.cls, name))
        raise AttributeMissing(name)

    def __repr__(self):
        return f"TupleVariable({self.items})"


class ListVariable(BaseSequenceVariable):
    """A list; one read from the inputs may start unread: its length and items are guarded
    only once the trace reads them (any use of ``items``), so a list the frame only
    appends to (a log, a registry) does not recompile each call as it grows."""

    _read = None  # reads (and guards) the input list's items, until first used
    appended: tuple | list = ()  # what append/extend added while unread

    @classmethod
    def unread(cls, read, source):
        var = cls.__new__(cls)
        var.source = source
        var._read = read
        var.appended = []
        return var

    @property
    def items(self):
        if self._read is not None:
            read, self._read = self._read, None
            self._items = read() + self.appended
        return self._items

    @items.setter
    def items(self, value):
        self._items = value

    def is_unread(self) -> bool:
        return self._read is not None

    def append_unread(self, values: list) -> bool:
        """append/extend without reading the items, when they are still unread."""
        if self._read is None:
            return False
        self.appended.extend(values)
        return True

    def python_type(self):
        return list

    def getattr(self, tx, name):
        if hasattr(list, name):
            from .functions import ContainerMethodVariable

            return ContainerMethodVariable(self, name)
        raise AttributeMissing(name)

    def check_mutable(self, tx):
        if self.source is not None:
            tx.side_effects.mutate_container(self)

    def __repr__(self):
        return "ListVariable(unread)" if self.is_unread() else f"ListVariable({self.items})"


class _WritesThroughSetitem(dict):
    """A dict whose ``setdefault`` and ``update`` store through its own ``__setitem__``."""

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, other=(), **kwargs):
        pairs = other.items() if isinstance(other, dict) else other
        for key, value in [*pairs, *kwargs.items()]:
            self[key] = value


class EntryTable(_WritesThroughSetitem):
    """A dict's entries as CPython's table holds them: a key inserted (not overwritten)
    takes the next position, after every entry already there, and a deleted key's
    position stays empty. An iterator walks these positions, so a key deleted and
    inserted again during iteration is a new entry to it, as it is to CPython's.
    (CPython compacts its table when it grows; that reshuffle is not modelled.)"""

    def __init__(self, items=()):
        super().__init__()
        self.positions: dict = {}  # key -> position
        self.next_position = 0
        self.version = 0  # changes with every insertion and deletion
        self.update(items)

    def __setitem__(self, key, value):
        if key not in self:
            self.positions[key] = self.next_position
            self.next_position += 1
            self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key):
        super().__delitem__(key)
        del self.positions[key]
        self.version += 1

    def pop(self, key, *default):
        if key in self:
            del self.positions[key]
            self.version += 1
        return super().pop(key, *default)

    def popitem(self):
        key, value = super().popitem()
        del self.positions[key]
        self.version += 1
        return key, value

    def clear(self):
        super().clear()
        self.positions.clear()
        self.version += 1

    def copy(self):
        return EntryTable(self)


class DictVariable(Variable):
    def __init__(self, items: dict, source=None, cls=dict):
        self.items = EntryTable(items)  # Python key -> Variable
        self.source = source
        self.cls = cls

    def python_type(self):
        return self.cls

    def truthy(self, tx):
        return bool(self.items)

    def iterate(self, tx):
        return [key_variable(k) for k in self.items]

    def make_iterator(self, tx, part: str = "keys"):
        from .iterators import KeyedIterator

        kind = type(iter(getattr({}, part)()))
        return KeyedIterator(tx, self, part, kind, "dictionary")

    def length(self, tx):
        return len(self.items)

    default_factory = None  # for collections.defaultdict
    owner = None  # the object of a dict subclass whose own storage this is (NewObjectVariable)

    def getitem(self, tx, key: Variable):
        k = _key_of(tx, key)
        found = self.items.get(k, _ABSENT)  # one lookup: a key's __eq__ runs as often as in CPython
        if found is _ABSENT:
            if self.default_factory is None:
                raise_in_user_code(KeyError, repr(k), args=(k,))
            self.check_mutable(tx)  # the entry the factory makes is a write (replayed into an input dict)
            found = self.items[k] = self.default_factory.call(tx, [], {})
        return found

    def getattr(self, tx, name):
        if name == "default_factory" and self.cls is collections.defaultdict:
            return self.default_factory or ConstantVariable(None)
        if hasattr(dict, name):
            from .functions import ContainerMethodVariable

            return ContainerMethodVariable(self, name)
        raise AttributeMissing(name)

    def check_mutable(self, tx):
        if self.source is not None:
            tx.side_effects.mutate_container(self)

    def is_constant(self):
        # A defaultdict's factory is a value of its own: only one without a factory folds.
        return self.default_factory is None and all(v.is_constant() for v in self.items.values())

    def as_constant(self):
        items = {k: v.as_constant() for k, v in self.items.items()}
        # A Counter, OrderedDict or defaultdict folds as itself (its repr names its class).
        if self.cls is collections.defaultdict:
            return collections.defaultdict(None, items)
        return self.cls(items) if self.cls in (collections.Counter, collections.OrderedDict) else items

    def __repr__(self):
        return f"DictVariable({self.items})"


class SetEntries(_WritesThroughSetitem):
    """A set's elements (stand-in key -> variable) in CPython's order: beside them a real
    set of the same keys, changed by the same insertions and removals in the same order,
    whose table is laid out as CPython's (the keys hash as the elements do), so iterating
    it (and ``pop()``) gives the elements in the order CPython's set gives them."""

    def __init__(self, items=()):
        super().__init__()
        self.table: set = set()
        self.update(items)

    @staticmethod
    def over(table: set, variables) -> "SetEntries":
        """Entries whose table is ``table`` itself (a real set or frozenset: a set operation's
        result, an input set, which the trace never changes), laid out as it is (a copy would
        be laid out anew): ``variables`` gives each key's variable."""
        entries = SetEntries()
        dict.update(entries, ((k, variables(k)) for k in table))
        entries.table = table
        return entries

    def __setitem__(self, key, value):
        if key not in self:
            self.table.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key):
        super().__delitem__(key)
        self.table.discard(key)

    def pop(self, key, *default):
        if key in self:
            self.table.discard(key)
        return super().pop(key, *default)

    def popitem(self):
        note_order_read(list(self.table))
        key = self.table.pop()  # CPython's set.pop(): the element its table gives first
        return key, super().pop(key)

    def clear(self):
        super().clear()
        self.table.clear()

    def __iter__(self):
        return iter(self.keys())

    def keys(self):
        keys = list(self.table)
        note_order_read(keys)
        return keys

    def values(self):
        return [self[k] for k in self.keys()]

    def items(self):
        return [(k, self[k]) for k in self.keys()]


def set_operation(tx, s: "SetVariable", name: str, others: list) -> "SetVariable":
    """``s.<name>(*others)`` (``union``, ``intersection``, ``difference``, ``symmetric_difference``;
    the operators call them too) run by Python's own set on the tables of stand-in keys: the
    result holds the elements CPython's algorithm keeps, from the operand it takes them from,
    in its order. An operand that is not a set is walked as an iterable, as CPython walks it."""
    operands, sources = [], [s.items.items()]
    for other in others:
        operand, pairs = _keys_of_iterable(tx, other)
        operands.append(operand)
        sources.append(pairs)
    return _over_result(getattr(s.items.table, name)(*operands), sources, s.frozen)


def set_from(tx, iterable, frozen: bool) -> "SetVariable":
    """``set(iterable)`` / ``frozenset(iterable)``, built by Python's own set over the keys (a
    set or dict operand is presized as CPython presizes it: the order follows)."""
    operand, pairs = _keys_of_iterable(tx, iterable)
    return _over_result((frozenset if frozen else set)(operand), [pairs], frozen)


def _keys_of_iterable(tx, value) -> tuple:
    """(what Python's set takes in place of ``value``: a set's table, a dict of its keys, a
    list of them; the (key, variable) pairs the result's elements come from)."""
    if isinstance(value, SetVariable):
        return value.items.table, value.items.items()
    pairs = [(_key_of(tx, v), v) for v in value.iterate(tx)]
    keys = [k for k, _ in pairs]
    return (dict.fromkeys(keys) if isinstance(value, DictVariable) else keys), pairs


def _over_result(table, sources: list, frozen: bool) -> "SetVariable":
    by_identity = {id(k): v for pairs in reversed(sources) for k, v in pairs}
    return SetVariable(SetEntries.over(table, lambda k: by_identity[id(k)]), frozen=frozen)


class SetVariable(Variable):
    def __init__(self, items: dict, source=None, frozen=False):
        # Python key -> Variable, in the order CPython's set iterates them
        self.items = items if isinstance(items, SetEntries) else SetEntries(items)
        self.source = source
        self.frozen = frozen

    def python_type(self):
        return frozenset if self.frozen else set

    def truthy(self, tx):
        return bool(self.items)

    def iterate(self, tx):
        return list(self.items.values())

    def make_iterator(self, tx):
        from .iterators import KeyedIterator

        return KeyedIterator(tx, self, "set", type(iter(set())), "Set")

    def length(self, tx):
        return len(self.items)

    def add(self, tx, value):
        if self.source is not None or self.frozen:
            unsupported("mutating a set that came from the function's inputs")
        self.items.setdefault(_key_of(tx, value), value)

    def getattr(self, tx, name):
        if hasattr(set, name):
            from .functions import ContainerMethodVariable

            return ContainerMethodVariable(self, name)
        raise AttributeMissing(name)

    def is_constant(self):
        return all(v.is_constant() for v in self.items.values())

    def as_constant(self):
        if not self.frozen and all(isinstance(v, ConstantVariable) and k is v.value for k, v in self.items.items()):
            note_order_read(list(self.items.table))
            return self.items.table  # the very table (its keys are the values): repr shows CPython's order
        return (frozenset if self.frozen else set)(v.as_constant() for v in self.items.values())


class SliceVariable(Variable):
    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step

    def python_type(self):
        return slice

    def is_constant(self):
        return all(v.is_constant() for v in (self.start, self.stop, self.step))

    def as_constant(self):
        return slice(self.start.as_constant(), self.stop.as_constant(), self.step.as_constant())

    def getattr(self, tx, name):
        if name in ("start", "stop", "step"):
            return getattr(self, name)
        raise AttributeMissing(name)


class IteratorVariable(Variable):
    """An iterator over values known when it is made (strings, ranges, a user
    ``__iter__``'s results); iterators that advance lazily are in iterators.py."""

    def __init__(self, items: list, error_at_end: tuple | None = None, kind: type | None = None):
        self.items = list(items)
        self.position = 0
        # (exception type, message) raised instead of stopping once the items run out
        # (``zip(..., strict=True)`` over iterables of unequal lengths).
        self.error_at_end = error_at_end
        self.kind = kind  # the iterator type CPython makes (str_ascii_iterator, range_iterator, ...)

    def python_type(self):
        return self.kind or type(iter([]))

    def next(self):
        if self.position >= len(self.items):
            if self.error_at_end is not None:
                raise_in_user_code(*self.error_at_end)
            return None
        item = self.items[self.position]
        self.position += 1
        return item

    def iterate(self, tx):
        rest = self.items[self.position:]
        self.position = len(self.items)
        if self.error_at_end is not None:
            raise_in_user_code(*self.error_at_end)
        return rest

    def remaining(self) -> list:
        """The items still to come, without advancing (what a graph break hands over)."""
        return self.items[self.position:]


def key_variable(key) -> Variable:
    """The symbolic value for a dict key (keys are constants, or objects keyed by identity or by
    their own hash)."""
    if isinstance(key, (IdentityKey, HashedKey)):
        return key.variable
    return ConstantVariable(key)


class IdentityKey:
    """A dict key standing for a non-constant object (hash and equality by identity)."""

    def __init__(self, variable, obj):
        self.variable = variable
        self.obj = obj

    def __hash__(self):
        # The object's own hash where it is C code (or torch's id()): a set of them is laid
        # out as CPython's (SetEntries); a value the trace made has none yet.
        obj = self.obj
        if isinstance(obj, torch.Tensor) or isinstance(type(obj).__hash__, types.WrapperDescriptorType):
            return hash(obj)
        return id(obj)

    def __eq__(self, other):
        return isinstance(other, IdentityKey) and other.obj is self.obj
