"""How the host code calls an ATen overload: by a name bound once at module level.

``torch.ops.aten.mm.default(...)`` in a call's body resolves four attributes and runs
``OpOverload.__call__`` (a Python frame) on every call. Both targets' host code instead
calls a module-level name bound when the module loads:

- an op in ``PUBLIC_FUNCTIONS`` is called through its public torch function
  (~0.45 us less than ``OpOverload.__call__`` on a CPU);
- any other through the function ``OpOverload.__call__`` forwards to (``overload_function``).

tests/backend_cpp/test_host_calls.py checks each table entry against ATen's dispatcher
(the overloads each call reaches), results and errors.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

# Overload -> the public torch function (``torch.<name>``, found in
# ``torch._C._VariableFunctions``) that resolves to it for the argument forms a graph
# passes: positional arguments, keyword-only ones by their schema names.
PUBLIC_FUNCTIONS = {
    aten.mm.default: "mm",
    aten.addmm.default: "addmm",
    aten.bmm.default: "bmm",
    aten.baddbmm.default: "baddbmm",
    aten.cumsum.default: "cumsum",
    aten.slice_scatter.default: "slice_scatter",
    aten.convolution.default: "convolution",
    aten._scaled_dot_product_flash_attention_for_cpu.default: "_scaled_dot_product_flash_attention_for_cpu",
}

CALLEES_PRELUDE = '''

def overload_function(op):
    """What ``op.__call__`` forwards to: the same call, one Python frame less."""
    return getattr(op, "_op", op)
'''


def overload_literal(op: torch._ops.OpOverload) -> str:
    """The overload by its qualified name (``torch.ops.aten.mm.default``)."""
    return f"torch.ops.{op.namespace}.{op._schema.name.split('::')[-1]}.{op._overloadname}"


def _keyword_only(op, kwargs: dict) -> bool:
    names = {a.name for a in op._schema.arguments if a.kwarg_only}
    return all(k in names for k in kwargs)


class ExternCallees:
    """The module-level names one host module calls its overloads by."""

    def __init__(self):
        self.bindings: dict = {}      # module-level name -> expression

    def callee(self, op: torch._ops.OpOverload, kwargs: dict) -> str:
        """The name the host code calls ``op`` by, given the keyword arguments it passes."""
        name = f"{op.namespace}_{op._schema.name.split('::')[-1]}_{op._overloadname}"
        if op in PUBLIC_FUNCTIONS and _keyword_only(op, kwargs):
            self.bindings[name + "_public"] = f"torch._C._VariableFunctions.{PUBLIC_FUNCTIONS[op]}"
            return name + "_public"
        self.bindings[name] = f"overload_function({overload_literal(op)})"
        return name

    def module_bindings(self) -> list:
        return [f"{name} = {expr}" for name, expr in sorted(self.bindings.items())]
