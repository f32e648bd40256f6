"""Exception objects made, raised or caught by the captured code.

Besides its type and args, an exception carries its chain as Python sets it:
``raise X from Y`` sets ``__cause__`` (and ``__suppress_context__``), and raising
while another exception is handled sets ``__context__`` to that one. Code that reads
them sees what eager Python would show, and an exception rebuilt for CPython at a
graph break (breaks.py) gets the same chain.
"""
from __future__ import annotations

from .base import AttributeMissing, Variable, unsupported
from .constant import NONE, ConstantVariable


class ExceptionVariable(Variable):
    """An exception object made or caught by the captured code."""

    def __init__(self, exc_type: type, args: list):
        self.exc_type = exc_type
        self.args = args
        self.cause: Variable = NONE
        self.context: Variable = NONE
        self.suppress_context = False

    def python_type(self):
        return self.exc_type

    def truthy(self, tx):
        return True

    def has_chain(self) -> bool:
        return self.cause is not NONE or self.context is not NONE or self.suppress_context

    def set_cause(self, cause: Variable) -> None:
        """``raise self from cause`` (cause: an exception, or None)."""
        if not (isinstance(cause, ExceptionVariable) or cause.is_constant() and cause.as_constant() is None):
            unsupported(f"exception cause {cause} (must be an exception or None)")
        self.cause = cause
        self.suppress_context = True

    def raised_while_handling(self, handled: "ExceptionVariable | None") -> None:
        """Python sets ``__context__`` when an exception is raised inside a handler."""
        if handled is not None and handled is not self and self.context is NONE:
            self.context = handled

    def getattr(self, tx, name):
        if name == "args":
            from .containers import TupleVariable

            return TupleVariable(self.args)
        if name == "__cause__":
            return self.cause
        if name == "__context__":
            return self.context
        if name == "__suppress_context__":
            return ConstantVariable(self.suppress_context)
        if name == "__class__":
            from .objects import ClassVariable

            return ClassVariable(self.exc_type)
        raise AttributeMissing(name)

    def setattr(self, tx, name, value):
        if name == "__cause__":
            self.set_cause(value)
        elif name == "__context__":
            self.context = value
        elif name == "__suppress_context__" and value.is_constant():
            self.suppress_context = bool(value.as_constant())
        else:
            unsupported(f"setting attribute {name!r} of an exception in compiled code")

    def __repr__(self):
        return f"ExceptionVariable({self.exc_type.__name__})"


def with_chain(exc: BaseException, cause, context, suppress_context: bool) -> BaseException:
    """``exc`` with the chain the trace gave it (an exception rebuilt at a graph break)."""
    exc.__context__ = context
    exc.__cause__ = cause
    exc.__suppress_context__ = suppress_context
    return exc
