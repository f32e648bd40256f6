"""Building code objects for Python 3.11 and 3.12 from abstract instructions.

The encoding work (jump offsets and EXTENDED_ARG, inline CACHE entries, the
exception table, the location table, stack size, the fast-locals/cells/free
variables layout) is done by the ``bytecode`` package, which supports both
versions from one abstract form: instructions name their arguments (``'x'``,
``CellVar('c')``, a ``Label``) instead of indices, and ``TryBegin``/``TryEnd``
pseudo instructions stand for exception-table ranges. This module adds what
surge needs on top: an index from the original code's offsets to its abstract
instructions (so a break point given as an offset can be found), the few
version differences in how instructions are spelled, and readable dumps.
"""
from __future__ import annotations

import dis
import io
import sys
import types

from bytecode import Bytecode, CellVar, FreeVar, Instr, Label, SetLineno, TryBegin, TryEnd

from ...errors import SurgeError

PY312 = sys.version_info >= (3, 12)

_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08
_CO_GENERATOR_LIKE = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async gen
# Instructions that set up a frame before its first user instruction.
_PREAMBLE = {"MAKE_CELL", "COPY_FREE_VARS", "RESUME"}


class BytecodeError(SurgeError):
    """A code object cannot be rebuilt for the requested break point."""


class Body:
    """The abstract instructions of an existing code object, indexed by original offset."""

    def __init__(self, code: types.CodeType):
        if code.co_flags & _CO_GENERATOR_LIKE:
            raise BytecodeError(f"{code.co_name} ({code.co_filename}:{code.co_firstlineno}) is a generator "
                                "or coroutine; graph breaks inside one are not supported")
        self.code = code
        # Exception ranges keep the original stack depths: generated code enters the
        # body in the middle (possibly inside a loop's `try`), where the package's own
        # depth computation, which walks from the entry, can miss a range.
        self.items = list(Bytecode.from_code(code, conserve_exception_block_stackdepth=True))
        offsets = [i.offset for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG")]
        instrs = [item for item in self.items if isinstance(item, Instr)]
        assert len(offsets) == len(instrs), "bytecode and dis disagree on the instruction count"
        self.instr_at = dict(zip(offsets, instrs))
        # The exception-table range covering each instruction (None outside any range).
        self.try_of: dict[int, TryBegin | None] = {}
        current = None
        for item in self.items:
            if isinstance(item, TryBegin):
                current = item
            elif isinstance(item, TryEnd):
                current = None
            elif isinstance(item, Instr):
                self.try_of[id(item)] = current

    def position(self, instr: Instr) -> int:
        for n, item in enumerate(self.items):
            if item is instr:
                return n
        raise KeyError(instr)

    def label_before(self, offset: int) -> Label:
        """A label placed just before the instruction at ``offset`` (inserted as needed)."""
        instr = self.instr_at[offset]
        label = Label()
        self.items.insert(self.position(instr), label)
        return label

    def drop_preamble(self) -> None:
        """Remove MAKE_CELL / COPY_FREE_VARS / RESUME: generated code has its own."""
        while self.items and isinstance(self.items[0], (Instr, SetLineno)) and \
                getattr(self.items[0], "name", None) in _PREAMBLE:
            self.items.pop(0)

    def cells_to_free(self) -> None:
        """Turn the original's cell variables into free variables of the generated code.

        The generated function receives the frame's existing cell objects in
        its closure, so closures made before the break and code after it share
        the same cells, exactly as in the original frame.
        """
        for item in self.items:
            if isinstance(item, Instr) and isinstance(item.arg, CellVar):
                item.arg = FreeVar(item.arg.name)

    def checked_local_loads(self) -> None:
        """On 3.12, read locals with LOAD_FAST_CHECK.

        The 3.12 compiler emits an unchecked LOAD_FAST where it proved the
        local bound from the function's entry; generated code enters in the
        middle, where locals that were not passed in are unbound.
        """
        if not PY312:
            return
        for item in self.items:
            if isinstance(item, Instr) and item.name == "LOAD_FAST":
                item.name = "LOAD_FAST_CHECK"


# -- spelling instructions the same way on both versions ---------------------------------

def call(argc: int, lineno: int | None) -> list[Instr]:
    """Call with ``argc`` arguments; the stack holds NULL, callable, args."""
    if PY312:
        return [Instr("CALL", argc, lineno=lineno)]
    return [Instr("PRECALL", argc, lineno=lineno), Instr("CALL", argc, lineno=lineno)]


def load_attr(name: str, lineno: int | None) -> Instr:
    return Instr("LOAD_ATTR", (False, name) if PY312 else name, lineno=lineno)


def load_local_checked(name: str, lineno: int | None) -> Instr:
    """Read a local that may be unbound (3.11's LOAD_FAST checks; 3.12 needs LOAD_FAST_CHECK)."""
    return Instr("LOAD_FAST_CHECK" if PY312 else "LOAD_FAST", name, lineno=lineno)


def forward_jump_name(name: str) -> str:
    """3.11 spells the direction of relative jumps; generated stubs always sit after the body."""
    return name.replace("BACKWARD", "FORWARD") if not PY312 else name


_FINAL = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE",
          "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE"}


def drop_unreachable(items: list) -> list:
    """``items`` without instructions that no path from the entry reaches.

    Generated code enters the user's body in the middle, so the code before
    the break is dead. It must go: the stack-size computation would otherwise
    walk it from an empty stack. A handler is reachable when any instruction
    in its exception-table range is.
    """
    where = {id(item): n for n, item in enumerate(items) if isinstance(item, Label)}
    enclosing = []
    current = None
    for item in items:
        if isinstance(item, TryBegin):
            current = item
        elif isinstance(item, TryEnd):
            current = None
        enclosing.append(current)
    reached = set()
    work = [0]
    while work:
        n = work.pop()
        while n < len(items) and n not in reached:
            reached.add(n)
            item = items[n]
            if isinstance(item, Instr):
                if enclosing[n] is not None:
                    work.append(where[id(enclosing[n].target)])
                if isinstance(item.arg, Label):
                    work.append(where[id(item.arg)])
                if item.name in _FINAL:
                    break
            n += 1
    kept = [item for n, item in enumerate(items) if n in reached or not isinstance(item, Instr)]
    return _drop_empty_ranges(kept)


def _drop_empty_ranges(items: list) -> list:
    """Remove TryBegin/TryEnd pairs that no longer cover any instruction."""
    empty = set()
    begin = None
    covered = False
    for item in items:
        if isinstance(item, TryBegin):
            begin, covered = item, False
        elif isinstance(item, TryEnd):
            if begin is not None and not covered:
                empty.add(id(begin))
            begin = None
        elif isinstance(item, Instr):
            covered = True
    return [item for item in items if not (isinstance(item, TryBegin) and id(item) in empty)
            and not (isinstance(item, TryEnd) and id(item.entry) in empty)]


def assemble(items: list, *, like: types.CodeType, name: str, qualname: str, argnames: tuple[str, ...],
             freevars: tuple[str, ...], cellvars: tuple[str, ...] = ()) -> types.CodeType:
    """A code object for ``items`` with positional parameters ``argnames``.

    File name, first line and flags come from ``like`` (the user's code), so
    tracebacks and debuggers point at the user's source.
    """
    bc = Bytecode(drop_unreachable(items))
    bc.name = name
    bc.filename = like.co_filename
    bc.first_lineno = like.co_firstlineno
    bc.argnames = list(argnames)
    bc.argcount = len(argnames)
    bc.posonlyargcount = 0
    bc.kwonlyargcount = 0
    bc.cellvars = list(cellvars)
    bc.freevars = list(freevars)
    bc.flags = like.co_flags & ~(_CO_VARARGS | _CO_VARKEYWORDS)
    bc.docstring = None
    try:
        code = bc.to_code(compute_exception_stack_depths=False)
    except Exception as exc:  # the package reports malformed input as assorted errors
        raise BytecodeError(f"cannot assemble {qualname} from {like.co_filename}:{like.co_firstlineno}: {exc}") from exc
    return code.replace(co_qualname=qualname)


def instruction_offsets(items: list, code: types.CodeType) -> dict[int, int] | None:
    """id(Instr) -> its offset in ``code``, which ``assemble(items, ...)`` made (None if the
    package emitted a different instruction count than ``items`` holds)."""
    kept = [item for item in drop_unreachable(items) if isinstance(item, Instr)]
    offsets = [i.offset for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG")]
    if len(kept) != len(offsets):
        return None
    return {id(instr): offset for instr, offset in zip(kept, offsets)}


def make_function(code: types.CodeType, globals_: dict, cells: dict) -> types.FunctionType:
    """A function running ``code`` whose closure holds ``cells[name]`` for each free variable."""
    missing = [n for n in code.co_freevars if n not in cells]
    if missing:
        raise BytecodeError(f"{code.co_qualname} needs cells for {missing}")
    closure = tuple(cells[n] for n in code.co_freevars) or None
    return types.FunctionType(code, globals_, code.co_name, None, closure)


def dump(code: types.CodeType) -> str:
    """``dis``-like text of a generated code object, nested code objects left out."""
    out = io.StringIO()
    out.write(f"code {code.co_qualname} ({code.co_filename}:{code.co_firstlineno})\n")
    out.write(f"  params {code.co_varnames[:code.co_argcount]}  free {code.co_freevars}  "
              f"stacksize {code.co_stacksize}\n")
    dis.dis(code, file=out, depth=0)
    return out.getvalue()
