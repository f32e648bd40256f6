"""Generating one check-and-run function per cache entry.

The generated function checks every guard in order with straight-line code,
reads the graph inputs from the call's arguments, globals, closures and module
attributes, calls the compiled graph, and rebuilds the return value. It is
plain Python source (printed under ``SURGE_LOGS=guards``), executed once.
"""
from __future__ import annotations

import builtins
import dataclasses
import functools
import itertools
import math
import re

import torch

from . import native_checks
from .guard_aliases import alias_roots
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

    def inline(self, source: Source, root: Source) -> str:
        """The expression of ``source``, a part of ``root``, read from root's local and
        assigned to no local (it is evaluated only when root's identity test fails)."""
        if source == root:
            return self.value_of(root)
        return source.expr(self.inline(source.parent, root), self.consts)

    def condition(self, guard, value: str | None = None) -> str:
        """The guard's condition; ``value``: the expression standing for its source's value."""
        text = guard.condition
        for token, source in guard.more:
            text = text.replace(token, self.value_of(source))
        if guard.source is None:
            return text
        text = text.replace("{v}", value or self.value_of(guard.source))
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


# The builtins generated code calls (len, type, isinstance, ...), as they were when surge
# was imported: a user's program that rebinds builtins.len must not change how its
# guards are checked. Conditions on sizes name the math module for their roundings
# (``math.ceil(0.03125*s0)``: a meta kernel padding a size to a multiple of 32).
_ORIGINAL_BUILTINS = {**vars(builtins), "math": math}


def exec_entry(name: str, source: str, namespace: dict):
    """The function an entry's source defines, its globals ``namespace``."""
    namespace.setdefault("__builtins__", _ORIGINAL_BUILTINS)
    namespace.setdefault("surge_native", native_checks.CALLS)
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace[name]


def module_check(module: torch.nn.Module, cls_name: str) -> str:
    """What the trace took for granted of a module it held by identity (``{v}``: the
    call's module): its class, whether the instance overrides ``forward`` and whether it
    has backward hooks. Everything else it read is guarded where it was read. One call
    where the native checks are (native_checks.ModuleCalls)."""
    if native_checks.batching():
        return (f"surge_native.module_alike({{v}}, {cls_name}, {'forward' in module.__dict__}, "
                f"{bool(module._backward_hooks or module._backward_pre_hooks)})")
    forward = "in" if "forward" in module.__dict__ else "not in"
    backward_hooks = "" if module._backward_hooks or module._backward_pre_hooks else "not "
    return (f"type({{v}}) is {cls_name} and 'forward' {forward} {{v}}.__dict__ "
            f"and {backward_hooks}({{v}}._backward_hooks or {{v}}._backward_pre_hooks)")


def module_bindings(guards: GuardSet, consts: ConstTable) -> dict:
    """``entry_source``'s ``bound`` for the nn.Modules the trace held by identity.

    An entry binds each such module to the one the call passes (or a global holds)
    and checks it is alike, instead of comparing identities: instances of one class
    and structure (a deep copy, the layers of a stack) share entries, and their
    parameters are graph inputs read from the call's module.
    """
    targets = {identity_target(g) for g in guards.guards} - {None}
    return {name: module_check(value, consts.ref(type(value), type(value).__name__))
            for name, value in list(consts.objects())
            if name in targets and isinstance(value, torch.nn.Module)}


def immutable_root(guards: GuardSet, guard) -> Source | None:
    """The outermost source above (or at) the guard's source whose captured value was
    deep-immutable (``guards.immutable``): the guard is a fact about that object."""
    if guard.source is None or guard.other is not None or guard.more:
        return None
    root, source = None, guard.source
    while source is not None:
        if guards.immutable.get(source) is not None:
            root = source
        source = source.parent
    return root


def _guard_checks(codegen: EntryCodegen, guards: GuardSet, bound: dict, fast_paths: bool = True,
                  native: bool = False):
    """(guard, condition, comment) per check, in guard order; the lines a condition needs
    are added to ``codegen.lines`` before it is yielded. A ``bound`` constant is read from
    the call at its first identity guard (``K = v3``) and checked to be alike.

    With ``fast_paths``, consecutive guards about one deep-immutable captured value (a
    conv's ``stride`` tuple and its items) are one check, ``v is K or (...)``: the very
    object seen at capture passes them all by construction; another object (an alike
    module's own tuple, a new value) is checked fact by fact. And the guards below a
    source that ``guard_aliases`` found covered by an earlier one's are checked only when
    the call's two objects are not one object (``a3 = v9 is v2``, then ``a3 or (...)``).

    With ``native`` (native_checks.py), the static tensors are read where their guards
    stand and checked together after the other guards, in one ``TensorChecks`` call, and
    a guard with a ``native_condition`` is checked by that call in place."""
    assigned: list = []
    batched: list = []  # (the local holding a tensor, its spec)
    aliases = alias_roots(guards, set(bound)) if fast_paths else {}
    alias_tests: dict = {}  # aliased source -> the local holding its identity test
    group = None  # [root, identity test, conditions, texts, first guard]
    for guard in guards.guards:
        aliased = _outermost(guard, aliases)
        root = immutable_root(guards, guard) if fast_paths and aliased is None else None
        if group is not None and root != group[0]:
            yield _group_check(group)
            group = None
        if aliased is not None:
            test = alias_tests.get(aliased)
            if test is None:
                test = alias_tests[aliased] = f"a{len(alias_tests)}"
                codegen.lines.append(f"{test} = {codegen.value_of(aliased)} is {codegen.value_of(aliases[aliased])}")
            yield guard, f"{test} or ({codegen.condition(guard, codegen.inline(guard.source, aliased))})", guard.text
            continue
        if root is not None:
            if group is None:
                group = [root, f"{codegen.value_of(root)} is {guards.immutable[root]}", [], [], guard]
            group[2].append(codegen.condition(guard, codegen.inline(guard.source, root)))
            group[3].append(guard.text)
            continue
        if native and guard.tensor_spec is not None:
            batched.append((codegen.value_of(guard.source), guard.tensor_spec))
            continue
        if native and guard.native_condition is not None:
            guard = dataclasses.replace(guard, condition=guard.native_condition)
        target = identity_target(guard)
        if target in bound and target not in assigned:
            assigned.append(target)
            codegen.lines.append(f"{target} = {codegen.value_of(guard.source)}")
            yield guard, bound[target].replace("{v}", target), f"{guard.text} (or alike)"
            continue
        yield guard, codegen.condition(guard), guard.text
    if group is not None:
        yield _group_check(group)
    if batched:
        checks = codegen.consts.ref(native_checks.TensorChecks([spec for _value, spec in batched]), "tensor_checks")
        yield (None, f"{checks}.run({', '.join(value for value, _spec in batched)})",
               f"{len(batched)} tensors: class, dtype, device, shape, stride, requires_grad as captured")
    distinct = _distinct_check(assigned, dict(codegen.consts.objects()))
    if distinct is not None:
        # The trace took them for distinct objects (a write through one not seen through another).
        yield None, distinct, "the bound modules are distinct objects"


def _outermost(guard, aliases: dict) -> Source | None:
    """The outermost aliased source above (or at) the guard's source."""
    found, source = None, guard.source
    while source is not None and aliases:
        if source in aliases:
            found = source
        source = source.parent
    return found


def _group_check(group) -> tuple:
    _root, identical, conditions, texts, first = group
    return first, f"{identical} or ({' and '.join(conditions)})", "; ".join(texts)


def _distinct_check(assigned: list, captured: dict) -> str | None:
    """That the call's bound modules are distinct objects, as the trace's were. The class
    checks have passed by then, and one object has one class: only modules of a class
    bound more than once can be one object. A set of the modules themselves dedupes by
    identity first (so a class's ``__eq__`` can only merge distinct ones, a miss);
    classes with a ``__hash__`` of their own are put in by ``id``."""
    by_class: dict = {}
    for name in assigned:
        by_class.setdefault(type(captured.get(name)), []).append(name)
    names = [name for members in by_class.values() if len(members) > 1 for name in members]
    if len(names) < 2:
        return None
    items = [name if type(captured.get(name)).__hash__ is object.__hash__ else f"id({name})" for name in names]
    return f"len({{{', '.join(items)}}}) == {len(items)}"


def entry_source(guards: GuardSet, consts: ConstTable, *, input_sources: list, return_expr, effects=None,
                 has_graph=True, run_eagerly=False, hand_off=None, bound: dict | None = None):
    """(function name, source) of an entry; see ``generate_entry``.

    ``bound`` maps constants to checks (``{v}``: the value): the first identity guard
    of such a constant reads it from the call instead (``K = v3``) and checks it is
    like the captured object. The entry then serves any object at that source that
    passes its guards (a new process needs it, disk_cache.py; modules of one class
    share entries). By default the modules held by identity are bound."""
    codegen = EntryCodegen(consts)
    # An entry kept on disk passes its own ``bound`` and binds its objects by name,
    # strongly; an entry of this process reads weakly held constants first.
    weak_constants = bound is None
    if bound is None:
        bound = module_bindings(guards, consts)
    for _guard, cond, text in _guard_checks(codegen, guards, bound, native=native_checks.batching()):
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
        if hand_off is None:
            body.append("return result")
        else:
            # The state goes over in a list the receiver empties: no frame of this call
            # holds it, so an exception in it (raised by the break code) does not keep
            # itself, its traceback and the call's tensors alive in a reference cycle.
            body += ["state = [result]", "del result", f"return {hand_off}(fn, state)"]
    if weak_constants:  # every constant is named by now
        consts.rebound.update(bound)  # read from the call: the captured module may die
        guard_lines = weak_constant_lines(consts, guard_lines) + guard_lines
    name = f"surge_entry_{next(_entry_ids)}"
    lines = [f"def {name}(fn, args, kwargs):", "    try:"]
    lines += _indent(guard_lines or ["pass"], 2)
    lines += ["    except Exception:", "        return MISS", "    counters['cache_hits'] += 1"]
    lines += _indent(body, 1)
    return name, "\n".join(lines) + "\n"


def weak_constant_lines(consts: ConstTable, guard_lines: list[str]) -> list[str]:
    """The weakly held constants, read from their weak references; a dead one is a miss.
    A rebound module that the guards bind from the call before naming it needs no read."""
    first = _first_uses(consts.rebound, guard_lines)
    lines = []
    for name in consts.weak:
        if name in first and guard_lines[first[name]].startswith(f"{name} = "):
            continue
        lines.append(f"{name} = {name}{WEAK_SUFFIX}()")
        if name not in consts.rebound:  # a rebound module is read from the call at its first guard
            lines += [f"if {name} is None:  # the object died", "    return MISS"]
    return lines


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _first_uses(names, lines: list[str]) -> dict:
    """The index of the first line naming each of ``names`` (one pass over the lines)."""
    first: dict = {}
    for i, line in enumerate(lines if names else ()):
        for word in _IDENTIFIER.findall(line):
            if word in names and word not in first:
                first[word] = i
    return first


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
    checks: list = []
    # Taken one at a time: each check's reads are the lines the generator added for it.
    for i, check in enumerate(_guard_checks(codegen, guards, module_bindings(guards, consts), fast_paths=False)):
        checks.append(check)
        guard, cond, text = check
        new = list(codegen.lines)
        codegen.lines.clear()
        value = codegen.value_of(guard.source) if guard is not None and guard.source is not None else "ABSENT"
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
    namespace.update(failed=functools.partial(_failure_text, checks), ABSENT=_ABSENT)
    namespace.update(__builtins__=_ORIGINAL_BUILTINS, surge_native=native_checks.CALLS)
    exec(compile("\n".join(lines) + "\n", "<surge_guard_diagnosis>", "exec"), namespace)
    return namespace["diagnose"]


def _failure_text(checks: list, index: int, actual) -> str:
    guard, _cond, text = checks[index]
    if guard is None:  # a check of no single guard (bound modules distinct): its text says what failed
        return f"{text} failed"
    if actual is _ABSENT and guard.source is not None:
        return f"{guard.text} failed: {guard.source.name()} could not be read"
    if guard.actual is None and (actual is _ABSENT or guard.other is not None):
        return f"{guard.text} failed"  # a global-state check, or a relation: its text says what failed
    try:
        seen = (guard.actual or describe_actual)(actual)
    except Exception as why:  # a value whose repr raises: the guard's text still says which
        seen = f"(not describable: {type(why).__name__})"
    return f"{guard.text} failed: actual {seen}"
