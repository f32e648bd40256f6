"""Static facts about a code object at one instruction: stack depth and live locals.

Both are small dataflow analyses over ``dis`` instructions, the same on 3.11
and 3.12. A graph break needs them to know how many values sit on the value
stack at the break (to check the caller's layout) and which fast locals the
rest of the function may still read (the only locals a resume function needs).
"""
from __future__ import annotations

import dis
import sys
import types
from dataclasses import dataclass
from functools import lru_cache

# Instructions after which control never reaches the next instruction.
_NO_FALLTHROUGH = {
    "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE",
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP",
}
# Reads of a fast local (3.12 adds the checked / clearing forms). DELETE_FAST
# counts as a read: deleting an unbound local raises, so its binding matters.
_READS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_CLOSURE", "DELETE_FAST"}
_WRITES = {"STORE_FAST"}


@dataclass(frozen=True)
class HandlerEntry:
    start: int   # first covered offset
    end: int     # offset just past the covered range
    target: int  # handler offset
    depth: int   # stack depth the handler pops to before pushing
    lasti: bool


@dataclass(frozen=True)
class CodeFacts:
    instructions: tuple  # dis.Instruction, CACHE entries left out
    index_of: dict       # offset -> position in ``instructions``
    handlers: tuple      # HandlerEntry, from the exception table

    def handler_at(self, offset: int) -> HandlerEntry | None:
        for entry in self.handlers:
            if entry.start <= offset < entry.end:
                return entry
        return None

    def successors(self, position: int) -> list[tuple[int, bool]]:
        """(position, taken_jump) pairs that may run after the instruction at ``position``."""
        ins = self.instructions[position]
        found = []
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            found.append((self.index_of[ins.argval], True))
        if ins.opname not in _NO_FALLTHROUGH and position + 1 < len(self.instructions):
            found.append((position + 1, False))
        return found


@lru_cache(maxsize=512)
def code_facts(code: types.CodeType) -> CodeFacts:
    instructions = tuple(i for i in dis.get_instructions(code) if i.opname != "CACHE")
    index_of = {ins.offset: n for n, ins in enumerate(instructions)}
    handlers = tuple(HandlerEntry(e.start, e.end, e.target, e.depth, e.lasti)
                     for e in dis._parse_exception_table(code))
    return CodeFacts(instructions, index_of, handlers)


def _effect(ins, jumped: bool) -> int:
    # 3.11's compiler books a call's pops half on PRECALL, half on CALL; at run
    # time PRECALL leaves the stack alone, and a break may sit between them.
    if ins.opname == "PRECALL":
        return 0
    if ins.opname == "CALL" and sys.version_info < (3, 12):
        return -(ins.arg + 1)
    arg = ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None
    return dis.stack_effect(ins.opcode, arg, jump=jumped)


@lru_cache(maxsize=512)
def stack_depths(code: types.CodeType) -> dict[int, int]:
    """Offset -> value-stack depth before that instruction, for reachable instructions."""
    facts = code_facts(code)
    depths = {0: 0}
    work = [0]
    while work:
        position = work.pop()
        ins = facts.instructions[position]
        depth = depths[position]
        edges = []
        for succ, jumped in facts.successors(position):
            edges.append((succ, depth + _effect(ins, jumped)))
        entry = facts.handler_at(ins.offset)
        if entry is not None:
            edges.append((facts.index_of[entry.target], entry.depth + 1 + int(entry.lasti)))
        for succ, new_depth in edges:
            if succ not in depths:
                depths[succ] = new_depth
                work.append(succ)
    return {facts.instructions[p].offset: d for p, d in depths.items()}


@lru_cache(maxsize=512)
def _live_in(code: types.CodeType) -> dict[int, frozenset]:
    facts = code_facts(code)
    n = len(facts.instructions)
    succs = []
    for position, ins in enumerate(facts.instructions):
        nexts = [p for p, _ in facts.successors(position)]
        entry = facts.handler_at(ins.offset)
        if entry is not None:
            nexts.append(facts.index_of[entry.target])
        succs.append(nexts)
    live = [frozenset()] * n
    changed = True
    while changed:  # backward fixpoint; code objects are small, a few sweeps suffice
        changed = False
        for position in range(n - 1, -1, -1):
            ins = facts.instructions[position]
            out = frozenset().union(*(live[s] for s in succs[position])) if succs[position] else frozenset()
            if ins.opname in _WRITES:
                out = out - {ins.argval}
            if ins.opname in _READS:
                out = out | {ins.argval}
            if out != live[position]:
                live[position] = out
                changed = True
    return {facts.instructions[p].offset: live[p] for p in range(n)}


# Parameters of a resume function that carry the stack of the frame it resumes: its
# first instructions push them back, and nothing reads them after that.
STACK_PARAM_PREFIX = "__surge_stack_"


def live_locals(code: types.CodeType, offset: int) -> tuple[str, ...]:
    """Fast locals (not cells) that may be read at or after ``offset``, in ``co_varnames`` order.

    A function that calls ``locals()``, ``vars()`` or ``exec``/``eval`` may read
    any local, so all of them count as live there, except a resume function's stack
    parameters (passed on, they would collide with the next resume function's own).
    """
    names = set(code.co_names)
    cells = set(code.co_cellvars)
    if names & {"locals", "vars", "exec", "eval"}:
        return tuple(v for v in code.co_varnames if v not in cells and not v.startswith(STACK_PARAM_PREFIX))
    live = _live_in(code)[offset]
    return tuple(v for v in code.co_varnames if v in live and v not in cells)


# Values each instruction pops, where it is not "one push, net effect from dis".
_POPS = {"CALL": lambda a: a + 2, "CALL_FUNCTION_EX": lambda a: 3 + (a & 1), "PRECALL": lambda a: 0,
         "KW_NAMES": lambda a: 0, "NOP": lambda a: 0, "COPY": lambda a: 0, "SWAP": lambda a: a,
         "UNPACK_SEQUENCE": lambda a: 1, "UNPACK_EX": lambda a: 1, "BEFORE_WITH": lambda a: 1,
         "LOAD_METHOD": lambda a: 1, "LOAD_ATTR": lambda a: 1, "LOAD_SUPER_ATTR": lambda a: 3,
         "END_FOR": lambda a: 2, "END_SEND": lambda a: 2, "JUMP_IF_TRUE_OR_POP": lambda a: 1, "JUMP_IF_FALSE_OR_POP": lambda a: 1}
_NO_PUSH_PREFIXES = ("POP_", "STORE_", "DELETE_", "JUMP", "RETURN", "RAISE", "RERAISE")


def pops(ins) -> int:
    """How many stack values ``ins`` consumes (an upper bound for rarely seen instructions)."""
    if ins.opname in _POPS:
        return _POPS[ins.opname](ins.arg)
    net = dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
    if ins.opname.startswith(_NO_PUSH_PREFIXES):
        return -net
    return 1 - net if net <= 0 else 0


# Instructions that only prepare the following CALL.
_CALL_PREPARATION = {"PRECALL", "KW_NAMES"}


def call_start(code: types.CodeType, offset: int) -> int:
    """The offset where the call at ``offset`` starts being set up (its KW_NAMES / PRECALL).

    Generated code enters a call there, never in the middle: the compiler's
    stack accounting between PRECALL and CALL differs from the run-time stack.
    """
    facts = code_facts(code)
    position = facts.index_of[offset]
    if facts.instructions[position].opname == "CALL":
        while position > 0 and facts.instructions[position - 1].opname in _CALL_PREPARATION:
            position -= 1
    return facts.instructions[position].offset
