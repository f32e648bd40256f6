"""The shape of a frame's state at one instruction: stack slots and live locals."""
from __future__ import annotations

import enum
import types
from dataclasses import dataclass

from .analysis import STACK_PARAM_PREFIX, code_facts, pops, stack_depths


class Slot(enum.Enum):
    """What one value-stack slot holds at a break, bottom of the stack first."""

    VALUE = "value"  # any Python value (a for loop's iterator, a pending operand...): passed in
    NULL = "null"    # the NULL that 3.11/3.12 push below a callable: re-pushed, not passed
    WITH = "with"    # an active `with` block: the context manager is passed and re-entered


@dataclass(frozen=True)
class FrameLayout:
    """The Python state at one instruction: stack slots and live locals (by name)."""

    stack: tuple[Slot, ...]
    live_locals: tuple[str, ...]

    def param_names(self) -> tuple[str, ...]:
        stack = tuple(f"{STACK_PARAM_PREFIX}{n}" for n, slot in enumerate(self.stack) if slot is not Slot.NULL)
        return stack + self.live_locals


def _pushed(ins, count: int, method_slot) -> list[Slot]:
    """Kinds of the ``count`` slots ``ins`` pushes (its kind rules; everything else pushes values)."""
    name = ins.opname
    if name == "PUSH_NULL":
        return [Slot.NULL]
    if name == "BEFORE_WITH":
        return [Slot.WITH, Slot.VALUE]
    if count == 2 and name == "LOAD_GLOBAL":
        return [Slot.NULL, Slot.VALUE]
    if count == 2 and name in ("LOAD_METHOD", "LOAD_ATTR", "LOAD_SUPER_ATTR"):
        return [method_slot(ins) if callable(method_slot) else method_slot, Slot.VALUE]
    return [Slot.VALUE] * count


def stack_slots(code: types.CodeType, offset: int, *, method_slot=Slot.VALUE) -> tuple[Slot, ...]:
    """Slot kinds on the stack before the instruction at ``offset``.

    A method load (``obj.name(...)``) pushes either (method, self) or (NULL,
    function) depending on the object at run time; ``method_slot`` says which
    to assume for the first slot, or is called with the loading ``dis``
    instruction to say it per site (capture knows the object and decides).
    """
    facts = code_facts(code)
    depths = stack_depths(code)
    kinds: dict[int, list[Slot]] = {0: []}
    work = [0]
    goal = facts.index_of[offset]
    while work:
        position = work.pop()
        if position == goal:
            return tuple(kinds[position])
        ins = facts.instructions[position]
        here = kinds[position]
        base = here[:len(here) - pops(ins)]
        nexts = []
        for succ, _ in facts.successors(position):
            after = depths[facts.instructions[succ].offset]
            if ins.opname == "COPY":
                nexts.append((succ, here + [here[-ins.arg]]))
            elif ins.opname == "SWAP":
                swapped = list(here)
                swapped[-1], swapped[-ins.arg] = swapped[-ins.arg], swapped[-1]
                nexts.append((succ, swapped))
            elif after < len(base):  # a jump that pops more than the fall-through (FOR_ITER at the end)
                nexts.append((succ, here[:after]))
            else:
                nexts.append((succ, base + _pushed(ins, after - len(base), method_slot)))
        entry = facts.handler_at(ins.offset)
        if entry is not None:
            nexts.append((facts.index_of[entry.target], here[:entry.depth] + [Slot.VALUE] * (1 + int(entry.lasti))))
        for succ, new in nexts:
            if succ not in kinds:
                kinds[succ] = new
                work.append(succ)
    raise ValueError(f"offset {offset} is not reachable in {code.co_qualname}")
