"""The aot layer: torch-level FX graphs to functional ATen graphs, forward and backward.

See docs/aot.md for the contract of the graphs it produces.
"""
from .compile import AotCompiled, aot_compile, trace_aten
from .decompositions import CORE_OP_GROUPS, CORE_PACKETS, is_core
from .tracer import TensorMeta

__all__ = ["aot_compile", "trace_aten", "AotCompiled", "TensorMeta", "CORE_OP_GROUPS",
           "CORE_PACKETS", "is_core"]
