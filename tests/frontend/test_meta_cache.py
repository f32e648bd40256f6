"""Meta results remembered over symbolic sizes (frontend/meta_cache.py).

A capture over symbolic sizes runs each op's Python meta kernel; an op met again with
arguments of the same symbolic layouts takes the remembered result. The unit tests drive
``MetaCache`` on meta tensors of one shape environment; the end-to-end ones compile with
``dynamic=True`` and compare with eager at several sizes, counting the meta runs saved.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import surge
from surge.frontend import meta_cache
from surge.frontend.meta_cache import MetaCache
from surge.frontend.shape_env import ShapeEnv
from surge.frontend.sources import ArgSource


def _symbolic_meta(env: ShapeEnv, name: str, rows: int, cols: int) -> torch.Tensor:
    s0 = env.size_symbol(ArgSource(0, name), rows, "test")
    return torch.empty(s0, cols, device="meta")


def _run(cache: MetaCache, func, *args):
    key = cache.key(func, args, {})
    found = cache.lookup(key, args, {})
    if found is not None:
        return found, True
    with torch._dispatch.python.enable_python_dispatcher():
        result = func(*args)
    cache.remember(key, args, {}, result)
    return result, False


def test_same_layouts_hit_with_fresh_results():
    env, cache = ShapeEnv(), MetaCache()
    x = _symbolic_meta(env, "x", 5, 8)
    y = torch.empty(x.shape, device="meta")   # another tensor of the same symbolic layout
    first, hit = _run(cache, torch.sin, x)
    assert not hit
    second, hit = _run(cache, torch.sin, y)
    assert hit and second is not first
    assert second.shape == first.shape and second.stride() == first.stride() and second.dtype == first.dtype
    # another dtype, another layout: misses
    assert not _run(cache, torch.sin, torch.empty(x.shape, dtype=torch.float64, device="meta"))[1]
    assert not _run(cache, torch.sin, y.t())[1]


def test_a_view_of_an_argument_is_remade_over_that_argument():
    env, cache = ShapeEnv(), MetaCache()
    x = _symbolic_meta(env, "x", 5, 8)
    y = torch.empty(x.shape, device="meta")
    _run(cache, torch.Tensor.t, x)
    view, hit = _run(cache, torch.Tensor.t, y)
    assert hit and view._is_view() and view.untyped_storage()._cdata == y.untyped_storage()._cdata
    parts, _ = _run(cache, torch.Tensor.split, x, 4)
    again, hit = _run(cache, torch.Tensor.split, y, 4)
    assert hit and [p.storage_offset() for p in again] == [p.storage_offset() for p in parts]
    assert all(p.untyped_storage()._cdata == y.untyped_storage()._cdata for p in again)


def test_in_place_results_and_views_as_another_dtype_always_run():
    env, cache = ShapeEnv(), MetaCache()
    x = _symbolic_meta(env, "x", 5, 8)
    _run(cache, torch.Tensor.t_, x)
    assert not _run(cache, torch.Tensor.t_, torch.empty(x.shape, device="meta"))[1]
    _run(cache, torch.Tensor.view, x, torch.int32)
    assert not _run(cache, torch.Tensor.view, torch.empty(x.shape, device="meta"), torch.int32)[1]


def test_results_that_require_grad_are_not_kept():
    env, cache = ShapeEnv(), MetaCache()
    x = _symbolic_meta(env, "x", 5, 8).requires_grad_()
    _run(cache, torch.sin, x)
    assert not _run(cache, torch.sin, x)[1]


def test_an_argument_without_a_key_always_runs():
    cache = MetaCache()
    assert cache.key(torch.sin, (object(),), {}) is None
    assert cache.lookup(None, (), {}) is None


class _Layers(torch.nn.Module):
    def __init__(self, n: int = 4, width: int = 16):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(n))
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        for layer in self.layers:
            h = self.norm(x)
            q, k = layer(h).split(8, dim=-1)
            x = x + F.gelu(layer(h)) + torch.cat([k, q], dim=-1).transpose(0, 1).transpose(0, 1)
        return x


@pytest.fixture
def counted(monkeypatch):
    """Counts of the meta results taken from the cache and run, over a compile."""
    counts = {"hit": 0, "run": 0}
    real_lookup = MetaCache.lookup

    def lookup(self, key, args, kwargs):
        found = real_lookup(self, key, args, kwargs)
        counts["hit" if found is not None else "run"] += 1
        return found
    monkeypatch.setattr(meta_cache.MetaCache, "lookup", lookup)
    return counts


def test_repeated_layers_take_remembered_results_and_match_eager(counted):
    torch.manual_seed(0)
    model = _Layers().eval()
    compiled = surge.compile(model, dynamic=True, backend="eager", fullgraph=True)
    with torch.no_grad():
        for rows in (5, 9, 3, 17):
            x = torch.randn(rows, 16)
            torch.testing.assert_close(compiled(x), model(x))
    assert counted["hit"] > counted["run"], counted


def test_views_written_in_place_after_a_remembered_view_match_eager():
    def f(x, y):
        a = x.view(-1)
        a.mul_(2)
        b = y.view(-1)   # the same symbolic layout as ``a``'s view: remembered
        b.add_(1)
        return x + y, a.sum(), b.sum()

    compiled = surge.compile(f, dynamic=True, backend="eager", fullgraph=True)
    for rows in (3, 6, 11):
        x, y = torch.randn(rows, 4), torch.randn(rows, 4)
        expected = f(x.clone(), y.clone())
        got = compiled(x.clone(), y.clone())
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)


def test_grad_mode_is_part_of_the_key():
    w = torch.randn(4, 4, requires_grad=True)

    def f(x):
        with torch.no_grad():
            a = x @ w
        b = x @ w   # the same layouts with grad on: its result requires grad
        return a, b

    compiled = surge.compile(f, dynamic=True, backend="eager")
    for rows in (3, 7):
        x = torch.randn(rows, 4)
        a, b = compiled(x)
        assert not a.requires_grad and b.requires_grad
        b.sum().backward()
        torch.testing.assert_close(w.grad, x.sum(0, keepdim=True).t().expand(4, 4))
        w.grad = None
