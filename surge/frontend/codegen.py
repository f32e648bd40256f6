"""Generating one check-and-run function per cache entry.

The generated function checks every guard in order with straight-line code,
reads the graph inputs from the call's arguments, globals, closures and module
attributes, calls the compiled graph, and rebuilds the return value. It is
plain Python source (printed under ``SURGE_LOGS=guards``), executed once.
"""
from __future__ import annotations

import builtins
import itertools

from .guards import GuardSet
from .sources import ConstSource, ConstTable, Source


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
                   effects=None, compiled=None, run_eagerly=False, counters=None, finish="result"):
    """Source text and function object of one cache entry.

    ``return_expr(codegen)`` writes the return value's expression; ``compiled`` is the
    backend's callable (None when the capture made no graph); ``run_eagerly`` makes an
    entry that only checks guards and runs the original function (a recorded fallback).
    ``finish`` is the expression returned after the side effects, over ``result`` (a
    graph break's entry passes the frame state on to the break code there).
    """
    name, source = entry_source(guards, consts, input_sources=input_sources, return_expr=return_expr,
                                effects=effects, has_graph=compiled is not None, run_eagerly=run_eagerly,
                                finish=finish)
    namespace = dict(consts.values)
    namespace.update(MISS=MISS, compiled=compiled, counters=counters)
    return source, exec_entry(name, source, namespace)


# The builtins generated code calls (len, type, isinstance, ...), as they were when surge
# was imported: a user's program that rebinds builtins.len must not change how its
# guards are checked.
_ORIGINAL_BUILTINS = dict(vars(builtins))


def exec_entry(name: str, source: str, namespace: dict):
    """The function an entry's source defines, its globals ``namespace``."""
    namespace.setdefault("__builtins__", _ORIGINAL_BUILTINS)
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace[name]


def entry_source(guards: GuardSet, consts: ConstTable, *, input_sources: list, return_expr, effects=None,
                 has_graph=True, run_eagerly=False, finish="result", bound: dict | None = None):
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
        body.append(f"return {finish}")
    name = f"surge_entry_{next(_entry_ids)}"
    lines = [f"def {name}(fn, args, kwargs):", "    try:"]
    lines += _indent(guard_lines or ["pass"], 2)
    lines += ["    except Exception:", "        return MISS", "    counters['cache_hits'] += 1"]
    lines += _indent(body, 1)
    return name, "\n".join(lines) + "\n"


def identity_target(guard) -> str | None:
    """The constant an identity guard (``{v} is K``) compares with."""
    prefix = "{v} is "
    if guard.other is None and guard.condition.startswith(prefix) and guard.condition[len(prefix):].isidentifier():
        return guard.condition[len(prefix):]
    return None


def generate_diagnosis(guards: GuardSet, consts: ConstTable):
    """A function returning the text of the first failing guard (run on a cache miss only)."""
    codegen = EntryCodegen(consts)
    lines = ["def diagnose(fn, args, kwargs):"]
    for i, guard in enumerate(guards.guards):
        before = len(codegen.lines)
        cond = codegen.condition(guard)
        new = codegen.lines[before:]
        del codegen.lines[before:]
        lines.append("    try:")
        lines += _indent(new, 2)
        lines.append(f"        ok = {cond}")
        lines.append("    except Exception:")
        lines.append("        ok = False")
        lines.append(f"    if not ok: return TEXTS[{i}]")
    lines.append("    return None")
    namespace = dict(consts.values)
    namespace["TEXTS"] = [g.text for g in guards.guards]
    namespace["__builtins__"] = _ORIGINAL_BUILTINS
    exec(compile("\n".join(lines) + "\n", "<surge_guard_diagnosis>", "exec"), namespace)
    return namespace["diagnose"]
