"""Announcing a fallback to eager: the one function every layer calls.

A frame or a graph that runs eagerly for a reason the user did not ask for (a
backend error, an internal error, a dtype a backend refuses, an unusable cache,
the cache size limit, a frame capture can neither capture nor split, ...) is
reported by ``announce(reason)``: it is counted in ``surge.counters["fallbacks"]``,
logged on the ``fallbacks`` channel, and warned about once per code object (the
user's function, file:line, the reason in one line, and how to see more),
whatever the log channels; ``SURGE_LOGS=-fallbacks`` or
``options={"warn_fallbacks": False}`` silence the warning. A graph break is not a
fallback (both sides of it are compiled; ``surge.explain`` shows it) and is not
warned about.

Backends do not see the user's code object. The frontend opens ``at_user_code``
while it captures a call or hands a stored graph to a backend; the aot layer keeps
``current_site()`` of the graph it was given for what it compiles or runs later,
on a call, and re-opens it there. ``announce`` reads the open site; a backend called
on its own (through ``torch.compile(backend=surge.backend)``) has none, and its
warnings are once per reason.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import types
import weakref

from . import logs
from .counters import counters
from .options import Options

_logger = logging.getLogger("surge")


@dataclasses.dataclass(frozen=True)
class UserSite:
    """The user's code a fallback concerns, and whether its compile wants warnings."""

    code: types.CodeType
    name: str          # the function's qualified name, as the user wrote it
    warn: bool = True  # Options.warn_fallbacks of the compile

    @property
    def location(self) -> str:
        return f"{self.code.co_filename}:{self.code.co_firstlineno}"


_site: contextvars.ContextVar[UserSite | None] = contextvars.ContextVar("surge_user_site", default=None)
_warned_codes: "weakref.WeakSet[types.CodeType]" = weakref.WeakSet()
_warned_reasons: set[str] = set()  # fallbacks outside any user code: once per reason

# How a user sees more; part of every warning.
HOW_TO_SEE_MORE = ("SURGE_LOGS=fallbacks logs every fallback, surge.explain(fn)(*args) shows the capture; "
                   "SURGE_LOGS=-fallbacks or options={'warn_fallbacks': False} silence this warning")


@contextlib.contextmanager
def at_user_code(site: UserSite | None):
    """Fallbacks announced inside this block concern ``site``."""
    token = _site.set(site)
    try:
        yield
    finally:
        _site.reset(token)


def current_site() -> UserSite | None:
    return _site.get()


def announce(reason: str, *, graph: bool = False, location: str | None = None, options: Options | None = None,
             counted: bool = True, warn: bool = True, outcome: str = "runs eagerly") -> None:
    """Report that the current user code (``at_user_code``) ``outcome``s because of ``reason``.

    ``graph``: one graph of the frame, not the whole frame, is affected. ``location``:
    the user's file:line where the cause is, when known (else the function's first
    line). ``options``: the ``Options`` of a layer that has them (their
    ``warn_fallbacks`` counts as well as the site's). ``counted=False`` for what does
    not run eagerly (a stored artifact ignored and rebuilt); ``warn=False`` for what
    runs no slower, or is warned about elsewhere (the cpp backend's missing compiler).
    """
    site = _site.get()
    one_line = " ".join(str(reason).split())
    if len(one_line) > 500:
        one_line = one_line[:497] + "..."
    subject = "a graph" if site is None else f"{'a graph of ' if graph else ''}{site.name}"
    where = location or (site.location if site is not None else None)
    message = f"{subject}{f' ({where})' if where else ''} {outcome}: {one_line}"
    if counted:
        counters["fallbacks"] += 1
    logs.log("fallbacks", message)
    if not warn or logs.removed("fallbacks") or (site is not None and not site.warn):
        return
    if options is not None and not options.warn_fallbacks:
        return
    if site is not None:
        if site.code in _warned_codes:
            return
        _warned_codes.add(site.code)
    else:
        if one_line in _warned_reasons:
            return
        _warned_reasons.add(one_line)
    _logger.warning("surge: %s. %s", message, HOW_TO_SEE_MORE)


def with_context(error: BaseException, phase: str, location: str | None = None) -> BaseException:
    """``error`` with a note naming the user's code open now, the phase and the line:
    what ``raise_internal_errors`` raises instead of falling back."""
    site = _site.get()
    where = "" if site is None else f" of {site.name} ({site.location})"
    error.add_note(f"surge: raised during {phase}{where}" + (f", at {location}" if location else ""))
    return error


def forget_warnings() -> None:
    """Warn again about code already warned about (``surge.reset``)."""
    _warned_codes.clear()
    _warned_reasons.clear()
