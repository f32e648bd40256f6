"""The meta results of ops over symbolic sizes, remembered for one capture or aot trace.

With symbolic sizes a meta kernel runs torch's Python references under the Python
dispatcher (symbolic_meta.py), every size computation a SymInt operation: 10-50x a C++
meta kernel's time, most of what a capture and its aot trace add over symbolic sizes. A
model repeats its layers, so the same op meets inputs of the same symbolic layouts
again and again; the answer is the same each time (a meta kernel's output layout is a
function of its inputs' layouts, dtypes and the other arguments, and the decisions it
made on sizes are already facts of the shape environment, so asked again they are
decided the same way without a guard).

``MetaCache.key`` keys a call by the op (with what else decides its result: the grad
mode for the frontend) and its arguments (each tensor by its class, sizes, strides and
offset as expressions, dtype and ``requires_grad``; each size by its expression; other
values as they are); ``lookup`` makes fresh meta tensors of the remembered layouts.
Only what can be remade is kept: plain tensors not requiring grad (no autograd history
to remake), each in a storage of its own: a fresh one at offset 0 (a view of a temporary
the op made is as good as a fresh tensor) or an argument's, remade as the same view of
that argument (``as_strided``); plain values and sizes. An op that returns its argument
(in place) always runs. An argument the
key cannot describe (an object of another kind) always runs the op.
"""
from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from .size_node import expr_of

_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


class _Uncacheable(Exception):
    pass


def _size_key(s):
    return expr_of(s) if isinstance(s, _SYMBOLIC) else s


def _key(value):
    if isinstance(value, torch.Tensor):
        return (type(value), tuple(_size_key(s) for s in value.shape), tuple(_size_key(s) for s in value.stride()),
                _size_key(value.storage_offset()), value.dtype, value.requires_grad)
    if isinstance(value, _SYMBOLIC):
        return ("S", type(value), expr_of(value))
    if isinstance(value, _PLAIN):
        return (type(value), value)
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(_key(v) for v in value))
    raise _Uncacheable


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _tensors(args, kwargs) -> list:
    return [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]


class _Arguments:
    """The tensor arguments of a call: their positions by storage, and their ids."""

    def __init__(self, tensors: list):
        self.by_storage: dict = {}
        for position, t in enumerate(tensors):
            self.by_storage.setdefault(_storage(t), (position, t.dtype))
        self.ids = {id(t) for t in tensors}


def _remembered(value, arguments: _Arguments, outputs: set):
    """What ``_remade`` needs to make ``value`` again; ``outputs`` holds the storages of
    the fresh outputs seen so far (fresh outputs sharing one are not remade apart)."""
    if isinstance(value, torch.Tensor):
        # an argument itself (an in-place op's result): the op always runs
        if type(value) is not torch.Tensor or value.requires_grad or value.__dict__ or id(value) in arguments.ids:
            raise _Uncacheable
        storage = _storage(value)
        shape, stride, offset = tuple(value.shape), tuple(value.stride()), value.storage_offset()
        if storage in arguments.by_storage:   # a view of an argument (split's parts): made again over it
            position, dtype = arguments.by_storage[storage]
            if dtype != value.dtype:   # a view as another dtype
                raise _Uncacheable
            return ("A", position, shape, stride, offset)
        if offset != 0 or storage in outputs:
            raise _Uncacheable
        outputs.add(storage)
        return ("T", shape, stride, value.dtype)
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(_remembered(v, arguments, outputs) for v in value))
    if isinstance(value, _PLAIN + _SYMBOLIC):
        return ("V", value)
    raise _Uncacheable


def _remade(recipe, tensors: list):
    kind, *rest = recipe
    if kind == "T":
        shape, stride, dtype = rest
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    if kind == "A":
        position, shape, stride, offset = rest
        return tensors[position].as_strided(shape, stride, offset)
    if kind == "V":
        return rest[0]
    return kind(_remade(r, tensors) for r in rest[0])


class MetaCache:
    """Meta results by op and argument layouts, for the ops of one trace."""

    def __init__(self):
        self._results: dict = {}

    def key(self, func, args, kwargs):
        """The key of ``func(*args, **kwargs)``, or None when an argument has no key."""
        try:
            # a factory without a dtype makes the default one
            return (func, torch.get_default_dtype(), _key(args), tuple((k, _key(v)) for k, v in kwargs.items()))
        except (_Uncacheable, TypeError):   # TypeError: an unhashable value inside a key
            return None

    def lookup(self, key, args, kwargs):
        """A result for ``key`` (the key of ``args`` and ``kwargs``), or None."""
        recipe = self._results.get(key) if key is not None else None
        if recipe is None:
            return None
        # C++'s empty_strided takes symbolic sizes; the Python one the dispatcher would
        # pick costs several times more
        with torch._C._DisablePythonDispatcher():
            return _remade(recipe, _tensors(args, kwargs))

    def remember(self, key, args, kwargs, result) -> None:
        if key is None:
            return
        try:
            self._results[key] = _remembered(result, _Arguments(_tensors(args, kwargs)), set())
        except _Uncacheable:
            pass
