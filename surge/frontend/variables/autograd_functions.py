"""``MyFunction.apply(...)`` of a custom ``torch.autograd.Function``: one node of the graph.

The node calls ``apply`` itself, so the compiled graph runs the user's forward and
autograd records the user's backward, as in eager (tracing the forward's ops instead
would differentiate them, not run the user's backward). The result's metadata comes
from running ``apply`` on meta tensors; a forward that needs data (``.item()``, NumPy)
fails there, and the call is a graph break. The class itself is guarded where the
trace read it (a global, an attribute).
"""
from __future__ import annotations

import weakref

from .base import Variable, unsupported

_APPLY_FUNCTIONS: "weakref.WeakKeyDictionary[type, object]" = weakref.WeakKeyDictionary()


def apply_function(cls: type):
    """A plain function calling ``cls.apply``, named after the class: the graph node's
    target (FX writes a bound classmethod as ``Function.apply``, the base class's)."""
    found = _APPLY_FUNCTIONS.get(cls)
    if found is None:
        owner = weakref.ref(cls)  # the value must not keep its own key alive

        def apply(*args):
            return owner().apply(*args)

        apply.__name__ = apply.__qualname__ = f"{cls.__name__}_apply"
        found = _APPLY_FUNCTIONS[cls] = apply
    return found


class AutogradFunctionApplyVariable(Variable):
    def __init__(self, cls: type):
        self.cls = cls

    def truthy(self, tx):
        return True

    def call(self, tx, args, kwargs):
        from .tensor import TensorVariable, record_op

        if kwargs:
            unsupported(f"{self.cls.__qualname__}.apply() with keyword arguments (apply takes positional ones)")
        if not any(isinstance(a, TensorVariable) for a in args):
            unsupported(f"{self.cls.__qualname__}.apply() without a tensor argument")
        return record_op(tx, "call_function", apply_function(self.cls), list(args), {})

    def __repr__(self):
        return f"AutogradFunctionApplyVariable({self.cls.__qualname__})"
