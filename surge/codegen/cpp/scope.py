"""A block of generated C++ statements, with the values already computed in it."""
from __future__ import annotations


class Scope:
    """A block of statements; ``kind`` is "top", "row", "rloop", "xloop" or "masked"."""

    def __init__(self, kind: str, parent: "Scope | None" = None):
        self.kind = kind
        self.parent = parent
        self.lines: list[str] = []
        self.memo: dict = {}

    def lookup(self, key):
        scope = self
        while scope is not None:
            if key in scope.memo:
                return scope.memo[key]
            scope = scope.parent
        return None
