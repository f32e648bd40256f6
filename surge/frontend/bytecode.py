"""Decoded instructions of a code object, shared by the interpreter.

``dis`` already resolves names, constants and jump targets for both Python
3.11 and 3.12; this module adds what the interpreter needs on top: an index per
instruction, offset -> index maps for jumps, and the exception table (used to
know which ``with`` blocks are open at an instruction).
"""
from __future__ import annotations

import dis
import sys
import types
from dataclasses import dataclass

PY_VERSION = sys.version_info[:2]


@dataclass(frozen=True)
class Instruction:
    index: int
    opname: str
    arg: int | None
    argval: object
    offset: int
    lineno: int | None
    # Index of the jump target instruction, for jumps (None otherwise).
    target: int | None


@dataclass(frozen=True)
class ExceptionRange:
    start: int   # first instruction index covered
    end: int     # last instruction index covered (inclusive)
    target: int  # handler instruction index
    depth: int
    lasti: bool


@dataclass
class DecodedCode:
    code: types.CodeType
    instructions: list[Instruction]
    exception_table: list[ExceptionRange]


_DECODED: dict[types.CodeType, DecodedCode] = {}


def decode(code: types.CodeType) -> DecodedCode:
    """Instructions of ``code`` (cached: a code object is immutable)."""
    found = _DECODED.get(code)
    if found is not None:
        return found
    raw = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    index_of = {ins.offset: n for n, ins in enumerate(raw)}
    instructions = []
    lineno = code.co_firstlineno
    for n, ins in enumerate(raw):
        if ins.positions is not None and ins.positions.lineno is not None:
            lineno = ins.positions.lineno
        target = index_of.get(ins.argval) if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs else None
        instructions.append(Instruction(n, ins.opname, ins.arg, ins.argval, ins.offset, lineno, target))
    table = []
    for entry in dis._parse_exception_table(code):
        start = index_of.get(entry.start)
        last = max((n for off, n in index_of.items() if off < entry.end), default=start)
        table.append(ExceptionRange(start, last, index_of.get(entry.target), entry.depth, entry.lasti))
    decoded = DecodedCode(code, instructions, table)
    _DECODED[code] = decoded
    return decoded


def source_line(filename: str, lineno: int | None) -> str:
    import linecache

    if lineno is None:
        return ""
    return linecache.getline(filename, lineno).strip()

