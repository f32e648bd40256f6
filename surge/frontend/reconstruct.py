"""Rebuilding the return value on every call, as generated Python expressions.

The trace's return value is a tree of symbolic values; each kind says how to
write it as an expression over the graph's outputs (``out[i]``), the call's
inputs (source expressions) and constants, so the compiled call returns
exactly the structure eager returns.
"""
from __future__ import annotations

import collections
import functools
import math
import types

from ..errors import Unsupported
from .variables.base import Variable
from .variables.builtins import BuiltinVariable
from .dynamic_dims import symbolic_expression
from .size_node import is_symbolic
from .variables.constant import ConstantVariable
from .variables.dict_views import DictViewVariable
from .variables.mapping_proxies import MappingProxyVariable
from .variables.hashing import check_rebuilt
from .variables.containers import (
    DictVariable, ListVariable, SetVariable, SliceVariable, TupleVariable, key_variable,
)
from .variables.functions import CachedFunctionVariable, PartialVariable, UserFunctionVariable, UserMethodVariable
from .variables.objects import DICT_STORAGE_BASES, ClassVariable, NewObjectVariable, NNModuleVariable, PythonModuleVariable, UserObjectVariable
from .variables.tensor import TensorVariable
from .variables.tensor_subclasses import PLAIN_TENSOR_CLASSES, rewrap
from .variables.torch_fns import TorchFunctionVariable

_LITERAL_TYPES = (int, str, bool, type(None), bytes)


def new_object(cls, attrs: dict, items: dict | None = None, shared: tuple = ()):
    """An instance of ``cls`` with ``attrs`` set, the way the trace built it; for a dict
    subclass, ``items`` are its dict storage, stored past the class's own __setitem__.
    Keys in ``shared`` hold in the storage the very object of the same-named attribute."""
    if items is None:
        obj = object.__new__(cls)
    else:
        base = next(k for k in cls.__mro__ if k in DICT_STORAGE_BASES)
        obj = base.__new__(cls)
        for key, value in items.items():
            base.__setitem__(obj, key, attrs[key] if key in shared else value)
    if attrs:  # a plain object() has no __dict__ (and can have no attributes)
        obj.__dict__.update(attrs)
    return obj


def collect_tensor_outputs(value: Variable, outputs: list, seen: set, each=None) -> None:
    """The graph-computed tensors a return value needs, in first-use order. ``each`` is
    called on the items of containers (default: this function)."""
    each = each or collect_tensor_outputs
    if isinstance(value, TensorVariable):
        if value.node.op != "placeholder" and value.node not in seen:
            seen.add(value.node)
            outputs.append(value)
        for item in value.attrs.values():  # a subclass instance's own attributes
            each(item, outputs, seen)
    elif isinstance(value, (TupleVariable, ListVariable)):
        for item in value.items:
            each(item, outputs, seen)
    elif isinstance(value, (DictVariable, SetVariable)):
        for item in value.items.values():
            each(item, outputs, seen)
    elif isinstance(value, SliceVariable):
        for item in (value.start, value.stop, value.step):
            each(item, outputs, seen)
    elif isinstance(value, (DictViewVariable, MappingProxyVariable)):
        each(value.dict.owner or value.dict, outputs, seen)
    elif isinstance(value, PartialVariable):
        for item in (value.fn, *value.args, *value.kwargs.values()):
            each(item, outputs, seen)
    elif isinstance(value, NewObjectVariable):
        for item in value.attrs.values():
            each(item, outputs, seen)
        if value.storage is not None:
            each(value.storage, outputs, seen)


class ReturnCodegen:
    def __init__(self, codegen, output_index: dict):
        self.codegen = codegen  # EntryCodegen: value_of(source), consts
        self.output_index = output_index  # fx node -> position in the graph's outputs

    def const(self, value, hint="K"):
        if is_symbolic(value):  # a symbolic size: its expression over the entry's reads of the symbols
            return symbolic_expression(self.codegen, value)
        if type(value) in _LITERAL_TYPES or (type(value) is float and math.isfinite(value)):
            return repr(value)
        return self.codegen.consts.ref(value, hint)

    def expr(self, value: Variable) -> str:
        if isinstance(value, TensorVariable):
            if value.node.op == "placeholder":
                return self.codegen.value_of(value.source)
            out = f"out[{self.output_index[value.node]}]"
            if value.cls in PLAIN_TENSOR_CLASSES:
                return out
            # A subclass instance: the plain output as its class, with its attributes.
            attrs = ", ".join(f"{k!r}: {self.expr(v)}" for k, v in value.attrs.items())
            cls = self.codegen.consts.ref(value.cls, value.cls.__name__)
            return f"{self.codegen.consts.ref(rewrap, 'rewrap')}({out}, {cls}, {{{attrs}}})"
        if isinstance(value, ConstantVariable):
            if isinstance(value.value, tuple):
                items = "(" + "".join(self.const(v) + ", " for v in value.value) + ")"
                if type(value.value) is tuple:
                    return items
                cls = self.codegen.consts.ref(type(value.value), type(value.value).__name__)
                # A namedtuple takes its fields one by one; other tuple subclasses take an iterable.
                return f"{cls}(*{items})" if hasattr(type(value.value), "_fields") else f"{cls}({items})"
            return self.const(value.value, type(value.value).__name__)
        if isinstance(value, CachedFunctionVariable):  # the lru_cache wrapper itself, not the function it holds
            return self.codegen.consts.ref(value.wrapper, value.fn.__name__)
        if isinstance(value, (TupleVariable, ListVariable, DictVariable, SetVariable)) and value.source is not None:
            # A container read from the inputs is returned as that same object
            # (its mutations, if any, are replayed into it before the return).
            return self.codegen.value_of(value.source)
        if isinstance(value, TupleVariable):
            items = "".join(self.expr(i) + ", " for i in value.items)
            if value.cls is None:
                return f"({items})"
            cls = self.codegen.consts.ref(value.cls, value.cls.__name__)
            if hasattr(value.cls, "_fields"):
                return f"{cls}({items})"
            return f"{cls}(({items}))"
        if isinstance(value, ListVariable):
            return "[" + ", ".join(self.expr(i) for i in value.items) + "]"
        if isinstance(value, DictVariable):
            check_rebuilt(value.items)
            body = ", ".join(f"{self.expr(key_variable(k))}: {self.expr(v)}" for k, v in value.items.items())
            if value.cls is dict:
                return "{" + body + "}"
            cls = self.codegen.consts.ref(value.cls, value.cls.__name__)
            if issubclass(value.cls, collections.defaultdict):  # its first argument is the factory
                factory = "None" if value.default_factory is None else self.expr(value.default_factory)
                return f"{cls}({factory}, {{{body}}})"
            return f"{cls}({{{body}}})"
        if isinstance(value, SetVariable):
            check_rebuilt(value.items)
            if not value.items:
                return "frozenset()" if value.frozen else "set()"
            body = "{" + ", ".join(self.expr(v) for v in value.items.values()) + "}"
            return f"frozenset({body})" if value.frozen else body
        if isinstance(value, (DictViewVariable, MappingProxyVariable)):
            # Of a dict, or of the storage of a dict subclass's object: over that object.
            mapping = self.expr(value.dict.owner or value.dict)
            if isinstance(value, DictViewVariable):
                return f"{mapping}.{value.part}()"
            return f"{self.codegen.consts.ref(types.MappingProxyType, 'MappingProxyType')}({mapping})"
        if isinstance(value, SliceVariable):
            return f"slice({self.expr(value.start)}, {self.expr(value.stop)}, {self.expr(value.step)})"
        if isinstance(value, NewObjectVariable):
            cls = self.codegen.consts.ref(value.cls, value.cls.__name__)
            builder = self.codegen.consts.ref(new_object, "new_object")
            body = ", ".join(f"{k!r}: {self.expr(v)}" for k, v in value.attrs.items())
            if value.storage is None:
                return f"{builder}({cls}, {{{body}}})"
            check_rebuilt(value.storage.items)
            shared = tuple(k for k, v in value.storage.items.items() if value.attrs.get(k) is v)
            items = ", ".join(f"{self.expr(key_variable(k))}: {'None' if k in shared else self.expr(v)}"
                              for k, v in value.storage.items.items())
            return f"{builder}({cls}, {{{body}}}, {{{items}}}, {shared!r})"
        if value.source is not None:
            return self.codegen.value_of(value.source)
        if isinstance(value, PartialVariable):  # made in the frame: made again over the same parts
            partial = self.codegen.consts.ref(functools.partial, "partial")
            args = "".join(f", {self.expr(a)}" for a in value.args)
            kwargs = ", ".join(f"{k!r}: {self.expr(v)}" for k, v in value.kwargs.items())
            return f"{partial}({self.expr(value.fn)}{args}, **{{{kwargs}}})"
        if isinstance(value, (NNModuleVariable, UserObjectVariable)):
            return self.codegen.consts.ref(value.obj, type(value.obj).__name__)
        if isinstance(value, ClassVariable):
            return self.codegen.consts.ref(value.cls, value.cls.__name__)
        if isinstance(value, (BuiltinVariable, TorchFunctionVariable, UserFunctionVariable)):
            return self.codegen.consts.ref(value.fn, getattr(value.fn, "__name__", "fn"))
        if isinstance(value, PythonModuleVariable):
            return self.codegen.consts.ref(value.module, value.module.__name__)
        if isinstance(value, UserMethodVariable):
            raise Unsupported("returning a bound method from compiled code")
        raise Unsupported(f"returning {value} from compiled code")
