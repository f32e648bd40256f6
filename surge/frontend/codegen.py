"""Generating one check-and-run function per cache entry.

The generated function checks every guard in order with straight-line code,
reads the graph inputs from the call's arguments, globals, closures and module
attributes, calls the compiled graph, and rebuilds the return value. It is
plain Python source (printed under ``SURGE_LOGS=guards``), executed once.
"""
from __future__ import annotations

import functools
import itertools

from .guards import GuardSet, describe_actual
from .sources import WEAK_SUFFIX, ConstSource, ConstTable, Source


class Miss:
    """The value a generated entry returns when one of its guards fails."""

    def __repr__(self):
        return "MISS"


MISS = Miss()
_entry_ids = itertools.count()


class EntryCodegen:
    def __init__(self, consts: ConstTable):
        self.consts = consts
        self.lines: list[str] = []
        self._locals: dict[Source, str] = {}

    def value_of(self, source: Source) -> str:
        """A local (or constant) holding the source's value, assigned once."""
        if isinstance(source, ConstSource):
            return source.expr(None, self.consts)
        found = self._locals.get(source)
        if found is not None:
            return found
        parent = self.value_of(source.parent) if source.parent is not None else None
        expression = source.expr(parent, self.consts)
        name = f"v{len(self._locals)}"
        self.lines.append(f"{name} = {expression}")
        self._locals[source] = name
        return name

    def condition(self, guard) -> str:
        if guard.source is None:
            return guard.condition
        text = guard.condition.replace("{v}", self.value_of(guard.source))
        if guard.other is not None:
            text = text.replace("{w}", self.value_of(guard.other))
        return text


def _indent(lines, depth):
    return [" " * (4 * depth) + line for line in lines]


def generate_entry(guards: GuardSet, consts: ConstTable, *, input_sources: list, return_expr,
                   effects=None, compiled=None, run_eagerly=False, counters=None, hand_off=None):
    """Source text and function object of one cache entry.

    ``return_expr(codegen)`` writes the return value's expression; ``compiled`` is the
    backend's callable (None when the capture made no graph); ``run_eagerly`` makes an
    entry that only checks guards and runs the original function (a recorded fallback).
    ``hand_off`` names the callable a graph break's entry passes the frame state to
    after the side effects (``hand_off(fn, [state])``, see ``entry_source``).
    """
    name, source = entry_source(guards, consts, input_sources=input_sources, return_expr=return_expr,
                                effects=effects, has_graph=compiled is not None, run_eagerly=run_eagerly,
                                hand_off=hand_off)
    namespace = dict(consts.values)
    namespace.update(MISS=MISS, compiled=compiled, counters=counters)
    return source, exec_entry(name, source, namespace)


def exec_entry(name: str, source: str, namespace: dict):
    """The function an entry's source defines, its globals ``namespace``."""
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace[name]


def entry_source(guards: GuardSet, consts: ConstTable, *, input_sources: list, return_expr, effects=None,
                 has_graph=True, run_eagerly=False, hand_off=None, bound: dict | None = None):
    """(function name, source) of an entry; see ``generate_entry``.

    ``bound`` maps constants to checks (``{v}``: the value): the first identity guard
    of such a constant reads it from the call instead (``K = v3``) and checks it is
    like the captured object. The entry then serves any object at that source that
    passes its guards, as a new process needs (disk_cache.py)."""
    codegen = EntryCodegen(consts)
    assigned: set = set()
    for guard in guards.guards:
        target = identity_target(guard)
        if bound and target in bound and target not in assigned:
            assigned.add(target)
            codegen.lines.append(f"{target} = {codegen.value_of(guard.source)}")
            codegen.lines.append(f"if not ({bound[target].replace('{v}', target)}):  # {guard.text} (or alike)")
            codegen.lines.append("    return MISS")
            continue
        cond = codegen.condition(guard)
        codegen.lines.append(f"if not ({cond}):  # {guard.text}")
        codegen.lines.append("    return MISS")
    inputs = [codegen.value_of(s) for s in input_sources]
    guard_lines = list(codegen.lines)
    codegen.lines.clear()
    if run_eagerly:
        body = ["return fn(*args, **kwargs)"]
    else:
        ret = return_expr(codegen)
        writes = effects(codegen) if effects is not None else []
        body = list(codegen.lines)
        if has_graph:
            body.append(f"out = compiled({', '.join(inputs)})")
        body.append(f"result = {ret}")
        body += writes  # replayed side effects, after the graph ran and the result was read
        if hand_off is None:
            body.append("return result")
        else:
            # The state goes over in a list the receiver empties: no frame of this call
            # holds it, so an exception in it (raised by the break code) does not keep
            # itself, its traceback and the call's tensors alive in a reference cycle.
            body += ["state = [result]", "del result", f"return {hand_off}(fn, state)"]
    if bound is None:  # (an entry kept on disk binds its objects by name, strongly)
        guard_lines = weak_constant_lines(consts) + guard_lines  # every constant is named by now
    name = f"surge_entry_{next(_entry_ids)}"
    lines = [f"def {name}(fn, args, kwargs):", "    try:"]
    lines += _indent(guard_lines or ["pass"], 2)
    lines += ["    except Exception:", "        return MISS", "    counters['cache_hits'] += 1"]
    lines += _indent(body, 1)
    return name, "\n".join(lines) + "\n"


def weak_constant_lines(consts: ConstTable) -> list[str]:
    """The weakly held constants, read from their weak references; a dead one is a miss."""
    lines = []
    for name in consts.weak:
        lines += [f"{name} = {name}{WEAK_SUFFIX}()", f"if {name} is None:  # the object died",
                  "    return MISS"]
    return lines


def identity_target(guard) -> str | None:
    """The constant an identity guard (``{v} is K``) compares with."""
    prefix = "{v} is "
    if guard.other is None and guard.condition.startswith(prefix) and guard.condition[len(prefix):].isidentifier():
        return guard.condition[len(prefix):]
    return None


_ABSENT = object()  # a failing guard's value that could not even be read


def generate_diagnosis(guards: GuardSet, consts: ConstTable):
    """A function returning the text of the first failing guard and the value it saw,
    ``L['n'] == 8 failed: actual 9`` (run on a cache miss only)."""
    codegen = EntryCodegen(consts)
    lines = ["def diagnose(fn, args, kwargs):"]
    for i, guard in enumerate(guards.guards):
        before = len(codegen.lines)
        cond = codegen.condition(guard)
        new = codegen.lines[before:]
        del codegen.lines[before:]
        value = codegen.value_of(guard.source) if guard.source is not None else "ABSENT"
        lines.append("    try:")
        lines += _indent(new, 2)
        lines.append(f"        ok = {cond}")
        lines.append("    except Exception:")
        lines.append("        ok = False")
        lines.append("    if not ok:")
        lines.append("        try:")
        lines.append(f"            actual = {value}")
        lines.append("        except Exception:")  # reading the value failed (a missing attribute)
        lines.append("            actual = ABSENT")
        lines.append(f"        return failed({i}, actual)")
    lines.append("    return None")
    # Read after the guards named every constant.
    lines[1:1] = _indent([f"{name} = {name}{WEAK_SUFFIX}()" for name in consts.weak], 1)
    namespace = dict(consts.values)
    namespace.update(failed=functools.partial(_failure_text, guards.guards), ABSENT=_ABSENT)
    exec(compile("\n".join(lines) + "\n", "<surge_guard_diagnosis>", "exec"), namespace)
    return namespace["diagnose"]


def _failure_text(guards: list, index: int, actual) -> str:
    guard = guards[index]
    if actual is _ABSENT and guard.source is not None:
        return f"{guard.text} failed: {guard.source.name()} could not be read"
    if guard.actual is None and (actual is _ABSENT or guard.other is not None):
        return f"{guard.text} failed"  # a global-state check, or a relation: its text says what failed
    try:
        seen = (guard.actual or describe_actual)(actual)
    except Exception as why:  # a value whose repr raises: the guard's text still says which
        seen = f"(not describable: {type(why).__name__})"
    return f"{guard.text} failed: actual {seen}"
