"""Resume functions called after the break code returns, not inside it.

Break code hands off to the next resume function as its last act (``return
call_resume(resume_fn, *args)``: the `with` blocks are left, nothing of the
break code runs after it). Made inside it, every hand-off would leave the break
code's frame, and the entry's that called it, on the stack under the resume
function: a loop split at each iteration (``breaks.py``) would nest a few
frames per iteration, until a model of a hundred layers met Python's recursion
limit, with each iteration's locals kept alive meanwhile. So the hand-off
returns a ``TailCall`` instead, and whoever called the entry from outside
(``CompiledFunction``, a compiled callee's stand-in) makes the calls in a loop
until one returns a value. Kept apart from the capture machinery: a process
that only runs stored captures imports this module, not ``breaks.py``.
"""
from __future__ import annotations


class TailCall:
    """``run(fn, args, {})``, to be made by the caller of the entry that returned it."""

    __slots__ = ("run", "fn", "args")

    def __init__(self, run, fn, args: tuple):
        self.run = run
        self.fn = fn
        self.args = args


def finish(result):
    """The value of a call whose entry may have returned a ``TailCall``."""
    while type(result) is TailCall:
        call = result
        result = call.run(call.fn, call.args, {})
        del call  # no frame keeps a finished call's arguments alive
    return result
