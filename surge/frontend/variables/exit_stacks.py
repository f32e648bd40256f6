"""``contextlib.ExitStack`` made in the frame: contexts and callbacks unwound in reverse.

``enter_context(cm)`` enters ``cm`` at once and keeps its ``__exit__``;
``callback(fn, *args, **kwargs)`` and ``push(exit)`` keep a callable. Leaving the
stack (its ``with`` block, or ``close()``) runs them last first as ExitStack does: an
exception leaving the block goes to each ``__exit__`` in turn, one that returns true
swallows it, one raised by an exit replaces it (with the one it replaced as its
``__context__``), and the last one standing propagates.

A graph break inside the block splits the frame where the stack is made, so that
CPython makes and unwinds the real one (as for ``@contextmanager`` blocks).
"""
from __future__ import annotations

from .base import AttributeMissing, RaisedInUserCode, Variable, unsupported
from .constant import NONE, ConstantVariable


class ExitStackVariable(Variable):
    def __init__(self, made_at=None):
        # (is a callback, callable, args, kwargs), oldest first.
        self.exits: list[tuple] = []
        self.made_at = made_at  # where a break inside its block splits the root frame

    def python_type(self):
        import contextlib

        return contextlib.ExitStack

    def truthy(self, tx):
        return True

    def enter(self, tx):
        return self

    def exit(self, tx):
        return self.unwind(tx, None)

    def exit_with_exception(self, tx, exc):
        return self.unwind(tx, exc)

    def getattr(self, tx, name):
        from .contexts import BoundContextMethod

        if name == "__enter__":
            return BoundContextMethod(self, "enter")
        if name == "__exit__":
            return BoundContextMethod(self, "exit")
        if name in ("enter_context", "callback", "push", "close"):
            return ExitStackMethodVariable(self, name)
        unsupported(f"ExitStack.{name} in compiled code")

    def unwind(self, tx, exc) -> Variable:
        """Run the kept exits, newest first, with ``exc`` (or no exception) leaving the block."""
        from .exceptions import TracebackVariable, exception_of
        from .objects import ClassVariable

        received = exc is not None
        frame_exc = exc  # what ExitStack.__exit__ finds being handled (sys.exc_info())
        suppressed = False
        pending: RaisedInUserCode | None = None
        while self.exits:
            is_callback, fn, args, kwargs = self.exits.pop()
            try:
                if is_callback:
                    fn.call(tx, list(args), dict(kwargs))
                    continue
                details = [NONE, NONE, NONE] if exc is None else [ClassVariable(exc.exc_type), exc, TracebackVariable()]
                if fn.call(tx, details, {}).truthy(tx):
                    suppressed, pending, exc = True, None, None
            except RaisedInUserCode as raised:
                new = exception_of(tx, raised)
                if exc is not None and new is not exc:
                    _fix_exception_context(new, exc, frame_exc)
                pending = RaisedInUserCode(new.exc_type, raised.message, new)
                exc = new
        if pending is not None:
            raise pending
        return ConstantVariable(received and suppressed)


def _fix_exception_context(new, old, frame_exc) -> None:
    """ExitStack's own rule for an exception an exit raised: the end of its context chain
    that is the exception the stack received now points to the one it replaced; a chain
    that ends in None or already reaches that one (a context the exit cleared) is kept."""
    from .exceptions import ExceptionVariable

    while True:
        context = new.context
        if not isinstance(context, ExceptionVariable) or context is old:
            return
        if context is frame_exc:
            break
        new = context
    new.context = old


class ExitStackMethodVariable(Variable):
    def __init__(self, stack: ExitStackVariable, name: str):
        self.stack = stack
        self.name = name

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        from ..interpreter.calls import load_attribute

        stack = self.stack
        if self.name == "close":
            stack.unwind(tx, None)
            return NONE
        if self.name == "callback":
            fn, *rest = args
            stack.exits.append((True, fn, rest, kwargs))
            return fn
        (target,) = args
        if self.name == "push":
            # A context manager's __exit__, or a callable taking the exception details.
            try:
                exit_fn = target.getattr(tx, "__exit__")
            except AttributeMissing:
                exit_fn = target
            stack.exits.append((False, exit_fn, (), {}))
            return target
        frame = tx.current_frame
        exit_fn = load_attribute(frame, target, "__exit__")
        result = load_attribute(frame, target, "__enter__").call(tx, [], {})
        stack.exits.append((False, exit_fn, (), {}))
        return result
