"""Generating code objects for graph breaks: assembler, static analyses, dumps."""
from .analysis import live_locals, stack_depths
from .assembler import BytecodeError, dump, make_function

__all__ = ["BytecodeError", "dump", "live_locals", "make_function", "stack_depths"]
