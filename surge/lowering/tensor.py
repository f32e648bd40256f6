"""LazyTensor: a tensor value during lowering, not yet a buffer.

Pointwise ops and views do not make buffers: they make a new ``LazyTensor``
whose ``loader`` computes one element from its inputs' loaders. A chain of
pointwise ops and views therefore becomes one expression, and only the places
that need memory (reductions, extern calls, graph outputs, values shared by
several consumers that are expensive to recompute) are realized into buffers.

A LazyTensor that is a plain strided view of a buffer keeps that ``view``
(buffer name and layout), so extern calls can take it without a copy.
"""
from __future__ import annotations

from typing import Callable

import torch

from .ir import Layout
from .sizes import sym
from .values import Load, Value


class LazyTensor:
    __slots__ = ("shape", "dtype", "device", "_loader", "view", "_memo", "origins")

    def __init__(self, shape, dtype: torch.dtype, device, loader: Callable | None = None,
                 view: tuple | None = None):
        self.shape = tuple(sym(s) for s in shape)   # sizes are expressions, also those a rule wrote as ints
        self.dtype = dtype
        self.device = device
        self._loader = loader
        self.view = view          # (buffer name, Layout) when a strided view of a buffer
        self._memo: dict = {}
        self.origins: tuple = ()  # the ATen ops folded into this value, for kernel names

    @staticmethod
    def of_buffer(name: str, layout: Layout, dtype, device) -> "LazyTensor":
        return LazyTensor(layout.shape, dtype, device, view=(name, layout))

    def load(self, index) -> Value:
        """The value at ``index`` (one sympy expression per dim)."""
        key = tuple(index)
        assert len(key) == len(self.shape), (key, self.shape)
        found = self._memo.get(key)
        if found is None:
            if self.view is not None:
                name, layout = self.view
                found = Load(name, layout.index(key), self.dtype)
            else:
                found = self._loader(list(key))
            self._memo[key] = found
        return found

    def with_view(self, shape, layout: Layout | None, remap: Callable) -> "LazyTensor":
        """A view of this tensor: strided if ``layout`` is given, else by ``remap``."""
        if layout is not None and self.view is not None:
            return LazyTensor(shape, self.dtype, self.device, view=(self.view[0], layout))
        return LazyTensor(shape, self.dtype, self.device, loader=lambda idx: self.load(remap(idx)))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        where = f" view of {self.view[0]}" if self.view else ""
        return f"LazyTensor({list(self.shape)}, {self.dtype}{where})"
