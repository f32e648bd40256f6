"""One object reached along several paths: its guards checked once.

A model often reaches one plain object from many places (each layer of a transformers
model holds ``self.config``, the model's one config). The trace guards what it read along
each path, so the same facts are checked again per path, through the object's Python
``__getattribute__`` each time. When every guard below a source ``B`` is, path for path,
also a guard below an earlier source ``A``, an entry tests ``B is A`` first: if the call's
objects are one object, ``B``'s guards evaluate exactly as ``A``'s twins do, which the entry
checks; if not, ``B``'s guards are checked as they are.
"""
from __future__ import annotations

import dataclasses

from .sources import Source


@dataclasses.dataclass(frozen=True)
class _Here(Source):
    """The source a guard is taken relative to, in the key that compares two paths."""

    def name(self):
        return "<here>"


_HERE = _Here()


def _rebase(source, old: Source, new: Source):
    """``source`` with ``old`` in its parent chain replaced by ``new``; None when ``old`` is
    not in that chain (or a source of the chain cannot be rebuilt)."""
    if source == old:
        return new
    parent = getattr(source, "parent", None)
    if parent is None or not dataclasses.is_dataclass(source):
        return None
    rebased = _rebase(parent, old, new)
    return None if rebased is None else dataclasses.replace(source, parent=rebased)


def _relative_key(guard, root: Source):
    def relative(source):
        if source is None:
            return None
        rebased = _rebase(source, root, _HERE)
        return source if rebased is None else rebased
    return (relative(guard.source), guard.condition, relative(guard.other),
            tuple((token, relative(s)) for token, s in guard.more))


def _chain(source):
    while source is not None:
        yield source
        source = getattr(source, "parent", None)


def alias_roots(guards, excluded: set) -> dict:
    """``{B: A}``: sources whose guards an identity test against an earlier source covers.

    Candidates are the objects guarded by their type (plain objects: configs and the
    like; modules and containers have their own checks). ``excluded``: constant names the
    entry binds from the call (a subtree naming one is not covered)."""
    typed: dict = {}  # condition of the type guard -> candidate sources, in guard order
    for guard in guards.guards:
        if guard.source is not None and guard.other is None and not guard.more \
                and guard.condition.startswith("type({v}) is ") and guard.condition[13:].isidentifier():
            typed.setdefault(guard.condition, [])
            if guard.source not in typed[guard.condition]:
                typed[guard.condition].append(guard.source)
    candidates = {s for sources in typed.values() if len(sources) > 1 for s in sources}
    if not candidates:
        return {}
    below: dict = {s: [] for s in candidates}  # candidate -> the guards under it
    for guard in guards.guards:
        for source in _chain(guard.source):
            if source in below:
                below[source].append(guard)
    keys = {}
    for source, under in below.items():
        if any(any(name in g.condition for name in excluded) for g in under):
            continue
        keys[source] = {_relative_key(g, source) for g in under}
    aliases: dict = {}
    for sources in typed.values():
        for i, b in enumerate(sources):
            if b not in keys or any(s in aliases for s in _chain(b)):
                continue
            for a in sources[:i]:
                if a in keys and a not in aliases and not _related(a, b) and keys[b] <= keys[a]:
                    aliases[b] = a
                    break
    return aliases


def _related(a: Source, b: Source) -> bool:
    return a in set(_chain(b)) or b in set(_chain(a))
