"""The symbolic bytecode interpreter: one frame per (inlined) function call, one
handler per opcode. Importing this package registers every handler."""
from . import calls, control, data, patterns, stack  # noqa: F401  (registration side effect)
from .frame import Frame

__all__ = ["Frame", "calls", "control", "data", "patterns", "stack"]
