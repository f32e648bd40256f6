"""Grad-mode context managers: ``torch.no_grad()``, ``enable_grad()``, ``set_grad_enabled()``.

Entering one records ``torch._C._set_grad_enabled(mode)`` in the graph (so the
graph runs its ops under the same mode as eager) and switches the mode the
trace itself runs under; leaving records the restore.
"""
from __future__ import annotations

import torch

from .base import RaisedInUserCode, Variable, raise_in_user_code, unsupported
from .constant import NONE, ConstantVariable


def set_grad_mode(tx, enabled: bool) -> None:
    if tx.grad_enabled == enabled:
        return
    tx.graph.create_node("call_function", torch._C._set_grad_enabled, (enabled,), {}, tx.stack_trace())
    torch._C._set_grad_enabled(enabled)
    tx.grad_enabled = enabled


class GradModeContextVariable(Variable):
    def __init__(self, target_mode: bool, prior_mode: bool | None = None, applied=False):
        self.target_mode = target_mode
        # set_grad_enabled(mode) switches the mode when constructed, like eager.
        self.prior_mode = prior_mode
        self.applied = applied

    def python_type(self):
        return torch.no_grad if not self.target_mode else torch.enable_grad

    def enter(self, tx) -> Variable:
        if not self.applied:
            self.prior_mode = tx.grad_enabled
            set_grad_mode(tx, self.target_mode)
        if tx.current_frame is not None:
            tx.current_frame.block_stack.append(self)
        return NONE

    def exit(self, tx) -> Variable:
        set_grad_mode(tx, self.prior_mode)
        stack = tx.current_frame.block_stack if tx.current_frame is not None else []
        if stack and stack[-1] is self:
            stack.pop()
        return NONE

    def getattr(self, tx, name):
        return context_method(self, name) or unsupported(f"attribute {name!r} of a grad-mode context")


def context_method(ctx, name: str):
    """``ctx.__enter__`` / ``ctx.__exit__`` of a context the trace models (its ``enter`` and
    ``exit``), or None for another name."""
    if name == "__enter__":
        return BoundContextMethod(ctx, "enter")
    if name == "__exit__":
        return BoundContextMethod(ctx, "exit")
    return None


class BoundContextMethod(Variable):
    def __init__(self, ctx, which):
        self.ctx = ctx
        self.which = which

    def call(self, tx, args, kwargs):
        if self.which == "exit" and args and not (args[0].is_constant() and args[0].as_constant() is None):
            return exit_with_exception(tx, self.ctx, args)
        return getattr(self.ctx, self.which)(tx)


def exit_with_exception(tx, ctx, args: list) -> Variable:
    """``ctx.__exit__(type, value, traceback)`` with an exception: a @contextmanager
    context throws it into its generator; the others leave as they always do (grad
    mode, autocast and profiler contexts and nullcontext never swallow one)."""
    from .exceptions import ExceptionVariable, construct_exception

    exc = args[1] if len(args) > 1 else NONE
    if not isinstance(exc, ExceptionVariable):
        cls = getattr(args[0], "cls", None)
        if not (exc.is_constant() and exc.as_constant() is None and isinstance(cls, type)
                and issubclass(cls, BaseException)):
            unsupported(f"__exit__ with {exc} as the exception")
        exc = construct_exception(tx, cls, [], {})  # contextlib makes ``typ()``
    handler = getattr(ctx, "exit_with_exception", None)
    if handler is not None:
        return handler(tx, exc)
    ctx.exit(tx)
    return NONE


class GeneratorContextVariable(Variable):
    """A ``@contextlib.contextmanager`` context: code before the yield runs on enter,
    the rest on exit."""

    def __init__(self, generator, made_at=None):
        self.generator = generator
        # (offset, count) of the root-frame instruction that made it: a graph break
        # inside its block splits the root frame there instead (``breaks.py``).
        self.made_at = made_at

    def enter(self, tx):
        value = self.generator.next()
        if value is None:
            unsupported("a @contextmanager generator that did not yield")
        return value

    def exit(self, tx):
        if self.generator.next() is not None:
            raise_in_user_code(RuntimeError, "generator didn't stop")
        return ConstantVariable(False)

    def exit_with_exception(self, tx, exc) -> Variable:
        """``__exit__`` of a block that raised ``exc``: thrown into the generator at its
        ``yield``, as contextlib does; True when the generator swallowed it."""
        try:
            if self.generator.throw(exc) is None:
                return ConstantVariable(True)  # the generator returned: suppressed
        except RaisedInUserCode as raised:
            if raised.exception is exc:
                return ConstantVariable(False)  # re-raised as is: __exit__ lets it propagate
            if issubclass(raised.exc_type, StopIteration) or issubclass(exc.exc_type, StopIteration):
                unsupported("a StopIteration thrown into a @contextmanager generator")
            raise
        raise_in_user_code(RuntimeError, "generator didn't stop after throw()")

    getattr = GradModeContextVariable.getattr


class NullContextVariable(Variable):
    """``contextlib.nullcontext(value)``: entering gives ``value``, leaving does nothing."""

    def __init__(self, enter_result):
        self.enter_result = enter_result

    def enter(self, tx):
        return self.enter_result

    def exit(self, tx):
        return NONE

    getattr = GradModeContextVariable.getattr


class ProfilerContextVariable(Variable):
    """``torch.profiler.record_function(name)``, ``profile()`` & co: markers for the
    profiler, no-ops in the graph (as under torch.compile). Entering gives the context
    itself; a graph break inside the block makes a real one for CPython to re-enter."""

    def __init__(self, cls: type, args: list, kwargs: dict):
        self.cls = cls
        self.args = args
        self.kwargs = kwargs

    def python_type(self):
        return self.cls

    def enter(self, tx):
        return self

    def exit(self, tx):
        return NONE

    getattr = GradModeContextVariable.getattr


def _profiler_classes() -> tuple:
    import torch.autograd.profiler as autograd_profiler
    import torch.profiler

    return (autograd_profiler.record_function, autograd_profiler.profile, torch.profiler.profile,
            autograd_profiler.emit_nvtx, autograd_profiler.emit_itt)


PROFILER_CLASSES = _profiler_classes()


def make_grad_context(tx, cls, args) -> GradModeContextVariable:
    if cls is torch.no_grad:
        return GradModeContextVariable(False)
    if cls is torch.enable_grad:
        return GradModeContextVariable(True)
    if cls is torch.set_grad_enabled:
        mode = bool(args[0].as_constant())
        prior = tx.grad_enabled
        set_grad_mode(tx, mode)
        return GradModeContextVariable(mode, prior_mode=prior, applied=True)
    unsupported(f"context manager {cls.__qualname__}")


GRAD_MODE_CLASSES = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)
