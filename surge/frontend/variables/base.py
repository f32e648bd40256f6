"""The base of symbolic values: what the interpreter pushes on its stack.

A ``Variable`` stands for one Python value during capture. Subclasses know how
to answer attribute reads, calls, iteration and truth tests for their kind of
value, either by computing a Python result now (constants, containers) or by
recording tensor work into the graph. Anything they cannot do raises
``Unsupported`` with a reason; the interpreter attaches the user's location.
"""
from __future__ import annotations

from ...errors import Unsupported


def unsupported(reason: str):
    raise Unsupported(reason)


class RaisedInUserCode(Unsupported):
    """A Python exception the captured code raises (KeyError, IndexError, ``raise``...).

    A ``try`` block in the captured code may catch it (the interpreter follows the
    code's exception table); if nothing does, the frame cannot be captured.
    """

    def __init__(self, exc_type: type, message: str = "", exception=None, exc_args: tuple | None = None):
        self.exc_type = exc_type
        self.message = message
        self.exception = exception  # the ExceptionVariable raised, when the code made one
        # The exception's args as Python gives them (``KeyError(key)``), when they are
        # not just the message: constants, or dict keys standing for objects.
        self.exc_args = exc_args
        super().__init__(f"{exc_type.__name__}: {message}" if message else f"{exc_type.__name__} raised")


def raise_in_user_code(exc_type: type, message: str = "", args: tuple | None = None):
    raise RaisedInUserCode(exc_type, message, exc_args=args)


class AttributeMissing(Exception):
    """getattr on a symbolic value found no such attribute (Python's AttributeError)."""


class Variable:
    # Where the value came from, if it was read from the call's inputs;
    # None for values created during the trace.
    source = None

    def python_type(self) -> type:
        unsupported(f"type() of {self}")

    def is_constant(self) -> bool:
        return False

    def as_constant(self):
        unsupported(f"{self} is not a Python constant here")

    def truthy(self, tx) -> bool:
        unsupported(f"truth value of {self}")

    def getattr(self, tx, name: str) -> "Variable":
        unsupported(f"attribute {name!r} of {self}")

    def setattr(self, tx, name: str, value: "Variable") -> None:
        unsupported(f"setting attribute {name!r} of {self} (side effects are not captured yet)")

    def delattr(self, tx, name: str) -> None:
        unsupported(f"del of attribute {name!r} of {self} (side effects are not captured yet)")

    def call(self, tx, args: list, kwargs: dict) -> "Variable":
        unsupported(f"calling {self}")

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> "Variable":
        return self.getattr(tx, name).call(tx, args, kwargs)

    def iterate(self, tx) -> list:
        unsupported(f"iterating over {self}")

    def length(self, tx) -> int:
        return len(self.iterate(tx))

    def __repr__(self) -> str:
        return type(self).__name__


class NullVariable(Variable):
    """The NULL that CALL-protocol opcodes push below a callable."""


NULL = NullVariable()


class KnownCallableVariable(Variable):
    """A callable that capture knows by identity (a builtin, a torch function):
    calls go through a per-callable rule table of the subclass."""

    def __init__(self, fn, source=None):
        self.fn = fn
        self.source = source

    def python_type(self):
        return type(self.fn)

    def truthy(self, tx):
        return True

    def identity_key(self):
        from .containers import IdentityKey

        return IdentityKey(self, self.fn)
