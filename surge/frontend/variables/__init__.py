"""Symbolic values of the capture interpreter, one module per kind of Python value."""
