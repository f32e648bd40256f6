"""Triton code generation: one ``@triton.jit`` kernel per scheduled kernel group."""
