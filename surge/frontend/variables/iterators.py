"""Iterators that advance as CPython's do: one item per ``next()``, read when it is asked for.

``iter(list)`` reads the list's items as it goes (an item appended later is seen, an
exhausted iterator stays exhausted); a dict or set iterator raises CPython's
``RuntimeError`` once its container changed size; ``zip``, ``map``, ``filter``,
``enumerate`` and ``reversed`` pull from their inputs only when they are advanced, so
a mapped function's side effects and a shared iterator's consumption happen in
eager's order (``zip(it, it)`` pairs consecutive items).

The base ``IteratorVariable`` (containers.py) holds items known when it is made:
strings, ranges, tensors' rows, user ``__iter__`` results. Every iterator answers
``remaining()``, the items still to come without running anything, which a graph
break hands to CPython as ``iter([...])``; a ``map``/``filter`` whose function has
not run yet cannot say (its calls would run early), so a break refuses it.
"""
from __future__ import annotations

from .base import raise_in_user_code, unsupported
from .constant import ConstantVariable
from .containers import EntryTable, IteratorVariable, TupleVariable, key_variable


def iterator_of(tx, value) -> IteratorVariable:
    """``iter(value)``."""
    if isinstance(value, IteratorVariable):
        return value
    make = getattr(value, "make_iterator", None)
    if make is not None:
        return make(tx)
    kind = None
    if value.is_constant() and type(value.as_constant()) in (str, bytes, tuple, range):
        kind = type(iter(value.as_constant()))
    return IteratorVariable(value.iterate(tx), kind=kind)


class LazyIterator(IteratorVariable):
    """An iterator whose items are found one ``next()`` at a time."""

    kind: type = type(iter([]))

    def __init__(self, tx):
        self.tx = tx
        self.error_at_end = None

    def python_type(self):
        return self.kind

    def truthy(self, tx):
        return True

    def iterate(self, tx):
        values = []
        while (value := self.next()) is not None:
            values.append(value)
        return values


class SequenceIterator(LazyIterator):
    """``iter(list)`` / ``iter(tuple)``: the sequence's item at the current index, now."""

    def __init__(self, tx, seq):
        super().__init__(tx)
        self.seq = seq  # None once exhausted: CPython's iterator lets go of its list
        self.index = 0
        self.kind = type(iter(() if issubclass(seq.python_type(), tuple) else []))

    def next(self):
        if self.seq is None or self.index >= len(self.seq.items):
            self.seq = None
            return None
        item = self.seq.items[self.index]
        self.index += 1
        return item

    def remaining(self):
        return [] if self.seq is None else self.seq.items[self.index:]


class ReversedIterator(LazyIterator):
    """``reversed(list)`` / ``reversed(tuple)``: index from the end, checked against the
    sequence's length at each step."""

    def __init__(self, tx, seq):
        super().__init__(tx)
        self.seq = seq
        self.index = len(seq.items) - 1
        self.kind = type(reversed(() if issubclass(seq.python_type(), tuple) else []))

    def next(self):
        if self.seq is None or not 0 <= self.index < len(self.seq.items):
            self.seq = None
            return None
        item = self.seq.items[self.index]
        self.index -= 1
        return item

    def remaining(self):
        return [] if self.seq is None else self.seq.items[self.index::-1] if self.index >= 0 else []


_END = object()  # no entry left (a key may be None)


class KeyedIterator(LazyIterator):
    """An iterator over a dict (keys, values or items) or a set, which CPython stops with
    a RuntimeError once the container's size changed. Over a dict's entry table it walks
    the table's positions as CPython's does: an entry inserted after its position (a key
    deleted and inserted again, the size unchanged) is reached, and reaching more entries
    than the dict had at the start is "keys changed during iteration"."""

    def __init__(self, tx, container, part: str, kind: type, what: str):
        super().__init__(tx)
        self.container = container
        self.part = part  # "keys", "values", "items" (a dict) or "set"
        self.kind = kind
        self.what = what  # "dictionary" / "Set", as CPython's message spells it
        self.keys = list(container.items)
        self.size = len(container.items)
        self.index = 0
        self.broken = False
        self.left = self.size  # entries still expected (CPython's di_len)
        self.position = -1  # the table position of the entry last returned
        self.version = getattr(container.items, "version", None)

    def next(self):
        items = self.container.items
        if self.broken or len(items) != self.size:
            self.broken = True
            raise_in_user_code(RuntimeError, f"{self.what} changed size during iteration")
        if isinstance(items, EntryTable):
            key = self._next_entry(items)
        else:
            key = self.keys[self.index] if self.index < len(self.keys) else _END
            if key is not _END and key not in items:
                self.broken = True
                raise_in_user_code(RuntimeError, f"{self.what} keys changed during iteration")
        if key is _END:  # (None is a key like any other)
            return None
        self.index += 1
        return self._item(key, items)

    def _next_entry(self, items):
        """The key at the first occupied position after the last one returned, or _END."""
        if items.version != self.version:  # inserted or deleted since: find the position again
            self.version = items.version
            self.keys = list(items)
            self.index = next((i for i, k in enumerate(self.keys) if items.positions[k] > self.position),
                              len(self.keys))
        if self.index >= len(self.keys):
            return _END
        if self.left == 0:
            self.broken = True
            raise_in_user_code(RuntimeError, f"{self.what} keys changed during iteration")
        key = self.keys[self.index]
        self.left -= 1
        self.position = items.positions[key]
        return key

    def _item(self, key, items):
        if self.part == "set":
            return items[key]
        if self.part == "keys":
            return key_variable(key)
        if self.part == "values":
            return items[key]
        return TupleVariable([key_variable(key), items[key]])

    def consumed(self) -> int:
        """How many of the container's entries are behind the iterator: a new iterator over
        the container rebuilt at a graph break is advanced that far (``breaks.py``)."""
        self.remaining()  # (refuses a container whose size or keys changed)
        items = self.container.items
        if isinstance(items, EntryTable):
            return sum(1 for k in items if items.positions[k] <= self.position)
        return self.index

    def remaining(self):
        items = self.container.items
        if len(items) != self.size:
            unsupported(f"an iterator over a {self.what} that changed size, at a graph break")
        if isinstance(items, EntryTable):
            keys = [k for k in items if items.positions[k] > self.position]
            if len(keys) > self.left:
                unsupported(f"an iterator over a {self.what} whose keys changed, at a graph break")
            return [self._item(k, items) for k in keys]
        return [self._item(k, items) for k in self.keys[self.index:] if k in items]


class ZipIterator(LazyIterator):
    kind = zip

    def __init__(self, tx, iterators: list, strict: bool):
        super().__init__(tx)
        self.iterators = iterators
        self.strict = strict
        self.done = False

    def next(self):
        if self.done:
            return None
        values = []
        for i, it in enumerate(self.iterators):
            value = it.next()
            if value is None:
                self.done = True
                if self.strict:
                    self._check_lengths(i)
                return None
            values.append(value)
        return TupleVariable(values) if self.iterators else None

    def _check_lengths(self, i: int) -> None:
        """zip(strict=True)'s ValueError, with its message."""
        plural = " " if i == 1 else "s 1-"
        if i > 0:
            raise_in_user_code(ValueError, f"zip() argument {i + 1} is shorter than argument{plural}{i}")
        for j, it in enumerate(self.iterators[1:], start=1):
            if it.next() is not None:
                plural = " " if j == 1 else "s 1-"
                raise_in_user_code(ValueError, f"zip() argument {j + 1} is longer than argument{plural}{j}")

    def remaining(self):
        if self.done:
            return []
        parts = [it.remaining() for it in self.iterators]
        if self.strict and len({len(p) for p in parts}) > 1:
            unsupported("zip(strict=True) over inputs of unequal lengths at a graph break")
        return [TupleVariable(list(group)) for group in zip(*parts)]


class EnumerateIterator(LazyIterator):
    kind = enumerate

    def __init__(self, tx, inner, start: int):
        super().__init__(tx)
        self.inner = inner
        self.count = start

    def next(self):
        value = self.inner.next()
        if value is None:
            return None
        item = TupleVariable([ConstantVariable(self.count), value])
        self.count += 1
        return item

    def remaining(self):
        return [TupleVariable([ConstantVariable(self.count + i), v]) for i, v in enumerate(self.inner.remaining())]


class MapIterator(LazyIterator):
    kind = map

    def __init__(self, tx, fn, iterators: list):
        super().__init__(tx)
        self.fn = fn
        self.iterators = iterators

    def next(self):
        values = []
        for it in self.iterators:
            value = it.next()
            if value is None:
                return None
            values.append(value)
        return self.fn.call(self.tx, values, {})

    def remaining(self):
        unsupported("a map() iterator at a graph break (its function has calls still to run)")


class FilterIterator(LazyIterator):
    kind = filter

    def __init__(self, tx, fn, inner):
        super().__init__(tx)
        self.fn = fn  # None: the items' own truth
        self.inner = inner

    def next(self):
        while (value := self.inner.next()) is not None:
            keep = value.truthy(self.tx) if self.fn is None else self.fn.call(self.tx, [value], {}).truthy(self.tx)
            if keep:
                return value
        return None

    def remaining(self):
        if self.fn is None:
            return [v for v in self.inner.remaining() if v.truthy(self.tx)]
        unsupported("a filter() iterator at a graph break (its function has calls still to run)")


class ChainIterator(LazyIterator):
    """``itertools.chain(*iterables)``: each iterable made an iterator when reached."""

    def __init__(self, tx, iterables: list):
        import itertools

        super().__init__(tx)
        self.kind = itertools.chain
        self.pending = list(iterables)
        self.current = None

    def next(self):
        while True:
            if self.current is None:
                if not self.pending:
                    return None
                self.current = iterator_of(self.tx, self.pending.pop(0))
            value = self.current.next()
            if value is not None:
                return value
            self.current = None

    def remaining(self):
        rest = self.current.remaining() if self.current is not None else []
        for iterable in self.pending:
            if not (isinstance(iterable, IteratorVariable) or hasattr(iterable, "make_iterator")):
                unsupported("itertools.chain with iterables not yet reached, at a graph break")
            rest = rest + iterator_of(self.tx, iterable).remaining()
        return rest


class ResumedLoopIterator(LazyIterator):
    """The iterator of a ``for`` loop a resume function continues inside, held unread.

    It is one of the resume function's stack parameters. While the trace has not read
    it, it is no value of the trace at all: no guard is installed on it, a graph break
    hands the very object over, and the loop's ``FOR_ITER`` in the root frame is where
    the frame splits (``interpreter/control.py``): CPython advances it, in break code,
    and calls the resume function at the loop body's start with the next item, or the
    one after the loop. So each iteration runs the same resume functions under the same
    guards, whatever the iterator's position. Anything else the trace does with it
    (``next(it)``, an inlined function looping over it, ``type(it)``) reads it: it is
    then wrapped as any input iterator is (``materialize``), guarded, and iterated by
    the trace as before.
    """

    def __init__(self, tx, value, source, make):
        super().__init__(tx)
        self.value = value
        self.source = source
        self.inner = None
        self._make = make  # wraps (and guards) the value: what an ordinary read does

    def materialize(self):
        if self.inner is None:
            inner = self._make()
            if not isinstance(inner, IteratorVariable):
                unsupported(f"iterating over {type(self.value).__qualname__} in compiled code")
            self.inner = inner
        return self.inner

    def unread(self) -> bool:
        return self.inner is None

    def python_type(self):
        return self.materialize().python_type()

    def truthy(self, tx):
        return self.materialize().truthy(tx)

    def next(self):
        return self.materialize().next()

    def iterate(self, tx):
        return self.materialize().iterate(tx)

    def remaining(self):
        return self.materialize().remaining()

    def length(self, tx):
        return self.materialize().length(tx)

    def getattr(self, tx, name):
        return self.materialize().getattr(tx, name)

    def setattr(self, tx, name, value):
        return self.materialize().setattr(tx, name, value)

    def delattr(self, tx, name):
        return self.materialize().delattr(tx, name)

    def call(self, tx, args, kwargs):
        return self.materialize().call(tx, args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        return self.materialize().call_method(tx, name, args, kwargs)

    def __repr__(self):
        return f"ResumedLoopIterator({type(self.value).__qualname__}{'' if self.inner is None else ', read'})"
