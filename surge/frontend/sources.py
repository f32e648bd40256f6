"""Where a value the trace read came from, as a Python expression.

A source names a value reachable from a call's inputs: an argument, a global,
a closure cell, an attribute or item of another source, or a constant object
whose identity is already guarded. Guards and graph-input extraction are
generated from these expressions, so the per-call code reads exactly what the
trace read.

``name()`` is the readable form used in guard listings (``L['x'].weight``);
``expr(parent)`` is the generated-code form, given the local variable that holds
the parent's value.
"""
from __future__ import annotations

import gc
import types
import typing
import weakref
from dataclasses import dataclass

import torch


def is_typing_form(value) -> bool:
    """``typing.Union``, ``typing.Literal``, ...: singletons compared by identity."""
    return isinstance(value, typing._SpecialForm)


class Source:
    parent: "Source | None" = None

    def name(self) -> str:
        raise NotImplementedError

    def expr(self, parent: str | None, consts: "ConstTable") -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name()


def held_weakly(value) -> bool:
    """Objects a cache entry refers to that may die while the cache lives on: modules
    and functions of the user's program. The entry holds them through weak references,
    so it does not keep them (and what they hold) alive; once one dies, the entry can
    never match again and is dropped (``ConstTable.when_dead``)."""
    if isinstance(value, torch.nn.Module):
        return True
    return isinstance(value, types.FunctionType) and not (value.__module__ or "").startswith(("torch", "surge."))


WEAK_SUFFIX = "_weak"


class ConstTable:
    """Objects referenced by generated code, each under a readable unique name.

    A weakly held object (``held_weakly``) is stored as ``<name>_weak``, a weak
    reference; generated code starts with ``<name> = <name>_weak()`` (``weak`` lists
    those names) and misses when it is None."""

    def __init__(self):
        self.values: dict[str, object] = {}
        self.weak: list[str] = []
        # Weakly held constants an entry reads from the call instead (modules it binds to
        # the call's alike module, codegen.module_bindings): their death drops nothing.
        self.rebound: set[str] = set()
        self._by_id: dict[int, str] = {}
        self._on_death: list = []
        self._weak_names: dict = {}  # weak reference -> constant name

    def ref(self, value: object, hint: str = "K") -> str:
        key = id(value)
        if key in self._by_id:
            return self._by_id[key]
        base = "".join(ch if ch.isalnum() else "_" for ch in hint)[:40] or "K"
        if not base[0].isalpha():
            base = "K_" + base
        name = f"{base}_{len(self.values)}"
        if held_weakly(value):
            ref = weakref.ref(value, self._referent_died)
            self.values[name + WEAK_SUFFIX] = ref
            self._weak_names[ref] = name
            self.weak.append(name)
        else:
            self.values[name] = value
        self._by_id[key] = name
        return name

    def objects(self):
        """(name, object) of every constant, weakly held ones resolved (None once dead)."""
        for name, value in self.values.items():
            if name.endswith(WEAK_SUFFIX) and name[:-len(WEAK_SUFFIX)] in self.weak:
                yield name[:-len(WEAK_SUFFIX)], value()
            else:
                yield name, value

    def when_dead(self, callback) -> None:
        """Call ``callback()`` once, when the first weakly held object dies (but a rebound one)."""
        self._on_death.append(callback)

    def _referent_died(self, ref) -> None:
        if self._weak_names.get(ref) in self.rebound:
            return
        callbacks, self._on_death = self._on_death, []
        for callback in callbacks:
            callback()


@dataclass(frozen=True)
class ArgSource:
    """A parameter of the compiled function bound from the call's ``args``."""

    index: int
    param: str
    parent = None

    def name(self):
        return f"L[{self.param!r}]"

    def expr(self, parent, consts):
        return f"args[{self.index}]"


@dataclass(frozen=True)
class KwargSource:
    """A parameter of the compiled function bound from the call's ``kwargs``."""

    key: str
    param: str
    parent = None

    def name(self):
        return f"L[{self.param!r}]"

    def expr(self, parent, consts):
        return f"kwargs[{self.key!r}]"


class ConstSource:
    """An object whose identity a guard already fixed; read as a constant (held weakly
    where the constant table holds it weakly, so a cache entry's guards do not keep it)."""

    parent = None

    def __init__(self, value: object, label: str):
        self._value = weakref.ref(value) if held_weakly(value) else value
        self._weak = held_weakly(value)
        self._hash = id(value)
        self.label = label

    @property
    def value(self):
        return self._value() if self._weak else self._value

    def name(self):
        return self.label

    def expr(self, parent, consts):
        return consts.ref(self.value, self.label.split("[")[0].split(".")[-1] or "K")

    def __eq__(self, other):
        return isinstance(other, ConstSource) and other.value is self.value

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"ConstSource({self.label})"


@dataclass(frozen=True, eq=False)
class GlobalSource:
    """``name`` in a function's globals dict."""

    globals_dict: dict
    key: str
    parent = None

    def name(self):
        module = self.globals_dict.get("__name__", "?")
        return f"G[{self.key!r}]" if module == "__main__" else f"G({module})[{self.key!r}]"

    def expr(self, parent, consts):
        return f"{consts.ref(self.globals_dict, 'G')}[{self.key!r}]"

    def __eq__(self, other):
        return isinstance(other, GlobalSource) and other.globals_dict is self.globals_dict and other.key == self.key

    def __hash__(self):
        return hash((id(self.globals_dict), self.key))


@dataclass(frozen=True)
class RootFunctionSource:
    """The compiled function object itself (its defaults and closure cells)."""

    parent = None

    def name(self):
        return "fn"

    def expr(self, parent, consts):
        return "fn"


@dataclass(frozen=True)
class AttrSource:
    parent: Source
    attr: str

    def name(self):
        return f"{self.parent.name()}.{self.attr}"

    def expr(self, parent, consts):
        return f"{parent}.{self.attr}"


@dataclass(frozen=True)
class CallSource:
    """``parent()``: the referent of a weak reference."""

    parent: Source

    def name(self):
        return f"{self.parent.name()}()"

    def expr(self, parent, consts):
        return f"{parent}()"


@dataclass(frozen=True)
class ItemSource:
    """``parent[key]`` for a constant key (int, str, ...) or a class (a dict keyed by types)."""

    parent: Source
    key: object

    def name(self):
        return f"{self.parent.name()}[{self.key!r}]"

    def expr(self, parent, consts):
        if isinstance(self.key, type) or is_typing_form(self.key):
            return f"{parent}[{consts.ref(self.key, 'key')}]"
        return f"{parent}[{self.key!r}]"


@dataclass(frozen=True)
class ModuleDictSource:
    """An entry of an nn.Module's ``_parameters``/``_buffers``/``_modules`` dict."""

    parent: Source
    table: str
    key: str

    def name(self):
        return f"{self.parent.name()}.{self.key}"

    def expr(self, parent, consts):
        return f"{parent}.{self.table}[{self.key!r}]"


@dataclass(frozen=True)
class DefaultSource:
    """A positional default (``fn.__defaults__[i]``) or keyword-only default."""

    parent: Source
    index: object
    kwonly: bool = False

    def name(self):
        table = "__kwdefaults__" if self.kwonly else "__defaults__"
        return f"{self.parent.name()}.{table}[{self.index!r}]"

    def expr(self, parent, consts):
        table = "__kwdefaults__" if self.kwonly else "__defaults__"
        return f"{parent}.{table}[{self.index!r}]"


@dataclass(frozen=True)
class ClosureSource:
    """The contents of closure cell ``index`` of a function (``fn.__closure__``)."""

    parent: Source
    index: int
    var: str

    def name(self):
        return f"{self.parent.name()}.<closure {self.var}>"

    def expr(self, parent, consts):
        return f"{parent}.__closure__[{self.index}].cell_contents"


@dataclass(frozen=True)
class ParamSource:
    """A parameter bound however the call passes it: positionally (``index``), by
    keyword, or else from its default (``default``: an index into ``__defaults__``,
    a name in ``__kwdefaults__``, or None when it has none)."""

    param: str
    index: int | None
    default: object
    parent = None

    def name(self):
        return f"L[{self.param!r}]"

    def expr(self, parent, consts):
        if self.default is None:
            fallback = f"kwargs[{self.param!r}]"
        else:
            table = "__defaults__" if isinstance(self.default, int) else "__kwdefaults__"
            fallback = f"(kwargs[{self.param!r}] if {self.param!r} in kwargs else fn.{table}[{self.default!r}])"
        if self.index is None:
            return fallback
        return f"(args[{self.index}] if len(args) > {self.index} else {fallback})"


@dataclass(frozen=True)
class PositionSource:
    """The ``index``-th key (``part`` "keys") or value ("values") of a dict, or element of
    a set ("elements"), in iteration order: where a key that is not a constant is read
    from (its hash runs in the trace, never in a guard)."""

    parent: Source
    index: int
    part: str

    def name(self):
        return f"list({self.parent.name()}{'.values()' if self.part == 'values' else ''})[{self.index}]"

    def expr(self, parent, consts):
        return f"list({parent}{'.values()' if self.part == 'values' else ''})[{self.index}]"


@dataclass(frozen=True)
class DictStorageSource:
    """``dict.__getitem__(parent, key)``: an entry of a dict subclass's own storage,
    read past any ``__getitem__`` the subclass defines (what ``super().get(key)`` reads)."""

    parent: Source
    key: object

    def name(self):
        return f"dict.__getitem__({self.parent.name()}, {self.key!r})"

    def expr(self, parent, consts):
        return f"{consts.ref(dict.__getitem__, 'dict_getitem')}({parent}, {self.key!r})"


def proxied_mapping(proxy: types.MappingProxyType):
    """The mapping a mappingproxy reads: CPython's proxy holds it as its one referent."""
    (mapping,) = gc.get_referents(proxy)
    return mapping


@dataclass(frozen=True)
class ProxiedMappingSource:
    """The dict behind the mappingproxy ``parent`` (``d.keys().mapping`` made by CPython)."""

    parent: Source

    def name(self):
        return f"<mapping of {self.parent.name()}>"

    def expr(self, parent, consts):
        return f"{consts.ref(proxied_mapping, 'proxied_mapping')}({parent})"


def class_entry(cls: type, name: str):
    """``name`` as stored in the first class of ``cls.__mro__`` that defines it (no
    descriptor call); AttributeError when none does (a guard reading it then fails)."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name, class_entry)
        if found is not class_entry:
            return found
    raise AttributeError(name)


@dataclass(frozen=True)
class ClassEntrySource:
    """A class-level attribute as the MRO finds it (``class_entry(parent, attr)``): what a
    method, property or class attribute read through an instance or a class resolves to."""

    parent: Source
    attr: str

    def name(self):
        return f"{self.parent.name()}.__mro__ entry {self.attr!r}"

    def expr(self, parent, consts):
        return f"{consts.ref(class_entry, 'class_entry')}({parent}, {self.attr!r})"


@dataclass(frozen=True)
class PlainTensorSource:
    """A tensor-subclass input as a plain ``torch.Tensor`` alias (same data, autograd
    history and version counter): what the graph and the tensor guards read, so that
    neither runs the class's ``__torch_function__``."""

    parent: Source

    def name(self):
        return f"{self.parent.name()} as Tensor"

    def expr(self, parent, consts):
        return f"{consts.ref(torch._C.TensorBase.as_subclass, 'as_subclass')}({parent}, {consts.ref(torch.Tensor, 'Tensor')})"


def class_has(cls: type, name: str) -> bool:
    """Whether some class of ``cls.__mro__`` defines ``name`` (what an absence guard reads)."""
    return any(name in klass.__dict__ for klass in cls.__mro__)


def super_entry(cls: type, after: type, name: str):
    """``name`` as ``super(after, obj)`` finds it for an instance of ``cls``: the first
    class after ``after`` in ``cls.__mro__`` defining it; AttributeError when none does."""
    mro = cls.__mro__
    start = next((i + 1 for i, k in enumerate(mro) if k is after), None)
    if start is None:
        raise AttributeError(name)
    for klass in mro[start:]:
        found = klass.__dict__.get(name, super_entry)
        if found is not super_entry:
            return found
    raise AttributeError(name)


@dataclass(frozen=True)
class SuperEntrySource:
    """What ``super(after, obj).attr`` resolves to for an instance of class ``parent``:
    guarded, it catches a base's method replaced, a class in between gaining the name,
    and ``__bases__`` reassigned."""

    parent: Source
    after: type
    attr: str

    def name(self):
        return f"super({self.after.__qualname__}, {self.parent.name()}).{self.attr} entry"

    def expr(self, parent, consts):
        return f"{consts.ref(super_entry, 'super_entry')}({parent}, {consts.ref(self.after, self.after.__name__)}, {self.attr!r})"
