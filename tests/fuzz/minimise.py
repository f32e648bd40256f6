"""Shrink a program that differs to a small one that still differs the same way.

Greedy reduction to a fixpoint: drop a mutation, a call's n, a statement (at any
depth), or replace a compound statement by one of its bodies; keep a change when
the difference is still found in the same aspect (result, exception, state...).
Last, the prelude keeps only the blocks the function and mutations mention.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from typing import Callable, Iterator

from . import prelude
from .generator import Node, Program


def _bodies(nodes: list[Node]) -> Iterator[list[Node]]:
    yield nodes
    for node in nodes:
        for _, body in node.parts:
            if body is not None:
                yield from _bodies(body)


def _candidates(program: Program) -> Iterator[Program]:
    for k in range(len(program.mutations)):
        yield dataclasses.replace(program, mutations=program.mutations[:k] + program.mutations[k + 1:])
    if len(program.n_values) > 1:
        yield dataclasses.replace(program, n_values=program.n_values[:1])
    count = sum(len(body) for body in _bodies(program.body))
    for target in range(count):
        for how in ("drop", "inline"):
            candidate = copy.deepcopy(program)
            if _edit(candidate.body, target, how):
                yield candidate


def _edit(body_root: list[Node], target: int, how: str) -> bool:
    """Drop (or replace by its first non-empty body) the ``target``-th statement counted
    over every body, outermost first."""
    seen = 0
    for body in _bodies(body_root):
        if target < seen + len(body):
            index = target - seen
            if how == "drop":
                del body[index]
                return True
            inner = [b for _, b in body[index].parts if b]
            if not inner:
                return False
            body[index:index + 1] = inner[0]
            return True
        seen += len(body)
    return False


def used_blocks(program: Program) -> tuple[str, ...]:
    """Names of the prelude blocks the function and mutations need (transitively)."""
    text = program.function_source() + "\n".join(program.mutations)
    kept: set[str] = {"torch"}
    changed = True
    while changed:
        changed = False
        for names, source in prelude.BLOCKS:
            if names[0] not in kept and any(re.search(rf"\b{re.escape(n)}\b", text) for n in names + _helpers(source)):
                kept.add(names[0])
                text += "\n" + source
                changed = True
    return tuple(kept)


def _helpers(source: str) -> tuple[str, ...]:
    """Functions a block defines besides its names (``make_counter``): a mutation may call them."""
    return tuple(re.findall(r"^def (\w+)", source, re.M))


def minimise(program: Program, still_differs: Callable[[Program], bool], max_checks: int = 400) -> Program:
    checks = 0
    improved = True
    while improved and checks < max_checks:
        improved = False
        for candidate in _candidates(program):
            checks += 1
            if still_differs(candidate):
                program, improved = candidate, True
                break
            if checks >= max_checks:
                break
    trimmed = dataclasses.replace(program, keep_blocks=used_blocks(program))
    return trimmed if still_differs(trimmed) else program
