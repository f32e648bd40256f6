"""``inspect.signature(fn)`` of a function whose code the trace knows.

Decorators in libraries inspect the functions they wrap (how many parameters
a chunk function takes, which keyword arguments a forward accepts). The
signature is computed now from the real function: its parameter names and
kinds come from the code object, which the function's identity guard fixes;
defaults are read through the function's default sources, so they carry guards
like any default the inliner reads.
"""
from __future__ import annotations

import inspect

from .base import AttributeMissing, Variable, unsupported
from .builtins import builtin
from .constant import ConstantVariable
from .containers import DictVariable
from .functions import UserFunctionVariable, UserMethodVariable


class ParameterVariable(Variable):
    """An ``inspect.Parameter``; ``default`` is a symbolic value (or ``Parameter.empty``)."""

    def __init__(self, parameter: inspect.Parameter, default: Variable):
        self.parameter = parameter
        self.default = default

    def python_type(self):
        return inspect.Parameter

    def truthy(self, tx):
        return True

    def getattr(self, tx, name):
        if name == "default":
            return self.default
        if name in ("name", "kind", "annotation") or name.isupper():
            value = getattr(self.parameter, name)
            return tx.wrap(value, None)
        if name == "empty":
            return tx.wrap(inspect.Parameter.empty, None)
        raise AttributeMissing(name)


class SignatureVariable(Variable):
    def __init__(self, parameters: dict):
        self.parameters = parameters  # name -> ParameterVariable

    def python_type(self):
        return inspect.Signature

    def truthy(self, tx):
        return True

    def getattr(self, tx, name):
        if name == "parameters":
            return DictVariable(self.parameters)
        if name == "empty":
            return tx.wrap(inspect.Signature.empty, None)
        raise AttributeMissing(name)


def _default_of(tx, fn: UserFunctionVariable, parameter: inspect.Parameter, position: int) -> Variable:
    if parameter.default is inspect.Parameter.empty:
        return tx.wrap(inspect.Parameter.empty, None)
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
        return fn.kwdefault(tx, parameter.name)
    n_defaults = len(fn.fn.__defaults__ or ())
    return fn.default(tx, position - (fn.code.co_argcount - n_defaults))


@builtin(inspect.signature)
def _signature(tx, obj, *, follow_wrapped=ConstantVariable(True), **rest):
    if rest:
        unsupported(f"inspect.signature() with {sorted(rest)}")
    bound = isinstance(obj, UserMethodVariable)
    fn = obj.fn if bound else obj
    if not isinstance(fn, UserFunctionVariable):
        unsupported(f"inspect.signature() of {obj}")
    real = fn.fn
    if "__wrapped__" in real.__dict__ or "__signature__" in real.__dict__:
        # The signature would come from elsewhere than this code object.
        unsupported(f"inspect.signature() of the wrapper {real.__qualname__}")
    signature = inspect.signature(real)
    parameters = {}
    for position, (name, parameter) in enumerate(signature.parameters.items()):
        if bound and position == 0:
            continue  # a bound method's signature drops self
        parameters[name] = ParameterVariable(parameter, _default_of(tx, fn, parameter, position))
    return SignatureVariable(parameters)
