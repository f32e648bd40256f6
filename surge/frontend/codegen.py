"""Generating one check-and-run function per cache entry.

The generated function checks every guard in order with straight-line code,
reads the graph inputs from the call's arguments, globals, closures and module
attributes, calls the compiled graph, and rebuilds the return value. It is
plain Python source (printed under ``SURGE_LOGS=guards``), executed once.
"""
from __future__ import annotations

import itertools

import torch

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


def exec_entry(name: str, source: str, namespace: dict):
    """The function an entry's source defines, its globals ``namespace``."""
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace[name]


def module_check(module: torch.nn.Module, cls_name: str) -> str:
    """What the trace took for granted of a module it held by identity (``{v}``: the
    call's module): its class, whether the instance overrides ``forward`` and whether it
    has backward hooks. Everything else it read is guarded where it was read."""
    has_forward = "forward" in module.__dict__
    has_backward_hooks = bool(module._backward_hooks or module._backward_pre_hooks)
    return (f"type({{v}}) is {cls_name} and ('forward' in {{v}}.__dict__) is {has_forward} "
            f"and bool({{v}}._backward_hooks or {{v}}._backward_pre_hooks) is {has_backward_hooks}")


def module_bindings(guards: GuardSet, consts: ConstTable) -> dict:
    """``entry_source``'s ``bound`` for the nn.Modules the trace held by identity.

    An entry binds each such module to the one the call passes (or a global holds)
    and checks it is alike, instead of comparing identities: instances of one class
    and structure (a deep copy, the layers of a stack) share entries, and their
    parameters are graph inputs read from the call's module.
    """
    targets = {identity_target(g) for g in guards.guards} - {None}
    return {name: module_check(value, consts.ref(type(value), type(value).__name__))
            for name, value in list(consts.values.items())
            if name in targets and isinstance(value, torch.nn.Module)}


def _guard_checks(codegen: EntryCodegen, guards: GuardSet, bound: dict):
    """(condition, comment) per check, in guard order; the lines a condition needs are
    added to ``codegen.lines`` before it is yielded. A ``bound`` constant is read from
    the call at its first identity guard (``K = v3``) and checked to be alike."""
    assigned: list = []
    for guard in guards.guards:
        target = identity_target(guard)
        if target in bound and target not in assigned:
            assigned.append(target)
            codegen.lines.append(f"{target} = {codegen.value_of(guard.source)}")
            yield bound[target].replace("{v}", target), f"{guard.text} (or alike)"
            continue
        yield codegen.condition(guard), guard.text
    if len(assigned) > 1:
        # The trace took them for distinct objects (a write through one not seen through another).
        yield (f"len({{{', '.join(f'id({t})' for t in assigned)}}}) == {len(assigned)}",
               "the bound modules are distinct objects")


def entry_source(guards: GuardSet, consts: ConstTable, *, input_sources: list, return_expr, effects=None,
                 has_graph=True, run_eagerly=False, finish="result", bound: dict | None = None):
    """(function name, source) of an entry; see ``generate_entry``.

    ``bound`` maps constants to checks (``{v}``: the value): the first identity guard
    of such a constant reads it from the call instead (``K = v3``) and checks it is
    like the captured object. The entry then serves any object at that source that
    passes its guards (a new process needs it, disk_cache.py; modules of one class
    share entries). By default the modules held by identity are bound."""
    codegen = EntryCodegen(consts)
    if bound is None:
        bound = module_bindings(guards, consts)
    for cond, text in _guard_checks(codegen, guards, bound):
        codegen.lines.append(f"if not ({cond}):  # {text}")
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
    texts = []
    for i, (cond, text) in enumerate(_guard_checks(codegen, guards, module_bindings(guards, consts))):
        texts.append(text)
        new = list(codegen.lines)
        codegen.lines.clear()
        lines.append("    try:")
        lines += _indent(new, 2)
        lines.append(f"        ok = {cond}")
        lines.append("    except Exception:")
        lines.append("        ok = False")
        lines.append(f"    if not ok: return TEXTS[{i}]")
    lines.append("    return None")
    namespace = dict(consts.values)
    namespace["TEXTS"] = texts
    exec(compile("\n".join(lines) + "\n", "<surge_guard_diagnosis>", "exec"), namespace)
    return namespace["diagnose"]
