"""Shared harness of the capture corpus.

Every corpus test does the same three things: compile a user program with a
backend that records the graphs it is handed, run it on fresh random inputs next
to eager PyTorch, and check that the results (values AND the exact structure of
the return value) match and that the expected number of graphs, recompiles and
fallbacks happened. Only surge's public API is used here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import math
import os
from typing import Any, Callable

import torch

import surge


class RecordingBackend:
    """A backend that keeps every GraphModule it receives and runs it unchanged."""

    def __init__(self):
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list] = []
        backend_name = os.environ.get("SURGE_CORPUS_BACKEND")
        if backend_name:   # symbolic graphs only where the backend it hands them to takes them
            from surge.backends import lookup_backend
            from surge.frontend.dynamic_dims import accepts_symbolic_sizes
            self.accepts_symbolic_sizes = accepts_symbolic_sizes(lookup_backend(backend_name))

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        # SURGE_CORPUS_BACKEND="aot_eager" / "cpp" / "triton" runs the whole corpus
        # through that backend: the graph is recorded, then compiled for real.
        backend_name = os.environ.get("SURGE_CORPUS_BACKEND")
        if backend_name:
            from surge.backends import lookup_backend
            return lookup_backend(backend_name)(gm, list(example_inputs))
        return gm.forward

    def op_names(self, index: int = -1) -> list[str]:
        """Names of the operations in one recorded graph (functions, methods, submodules)."""
        names = []
        for node in self.graphs[index].graph.nodes:
            if node.op == "call_function":
                names.append(getattr(node.target, "__name__", str(node.target)))
            elif node.op in ("call_method", "call_module"):
                names.append(str(node.target))
        return names

    def placeholder_count(self, index: int = -1) -> int:
        return sum(1 for n in self.graphs[index].graph.nodes if n.op == "placeholder")


class CounterDelta:
    """surge.counters relative to the moment this object was made."""

    def __init__(self):
        self.start = dict(surge.counters)

    def __getitem__(self, name: str) -> int:
        return surge.counters[name] - self.start.get(name, 0)

    def __repr__(self) -> str:
        return repr({k: self[k] for k in surge.counters})


class Args:
    """Positional and keyword arguments of one call."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs


def as_args(value) -> Args:
    if isinstance(value, Args):
        return value
    if isinstance(value, tuple):
        return Args(*value)
    return Args(value)


def fresh_copy(value):
    """An independent copy of an argument tree: new tensors with the same values,
    strides and requires_grad; containers rebuilt; other objects shared."""
    if isinstance(value, torch.nn.Parameter):
        return torch.nn.Parameter(value.detach().clone(), requires_grad=value.requires_grad)
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        return copy.requires_grad_(value.requires_grad)
    if isinstance(value, Args):
        return Args(*fresh_copy(value.args), **fresh_copy(value.kwargs))
    if type(value) in (list, tuple):
        return type(value)(fresh_copy(v) for v in value)
    if type(value) is dict:
        return {k: fresh_copy(v) for k, v in value.items()}
    return value


def is_namedtuple(value) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def assert_same(actual, expected, path: str = "result", rtol=None, atol=None) -> None:
    """Values within float tolerance, and the same structure and types exactly."""
    assert type(actual) is type(expected), (
        f"{path}: type {type(actual).__name__} != eager's {type(expected).__name__}"
    )
    if isinstance(expected, torch.Tensor):
        assert actual.requires_grad == expected.requires_grad, f"{path}: requires_grad differs"
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{path}: {m}")
    elif isinstance(expected, torch.Size):
        assert actual == expected, f"{path}: {actual} != {expected}"
    elif is_namedtuple(expected) or dataclasses.is_dataclass(expected):
        fields = expected._fields if is_namedtuple(expected) else [f.name for f in dataclasses.fields(expected)]
        for name in fields:
            assert_same(getattr(actual, name), getattr(expected, name), f"{path}.{name}", rtol, atol)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{path}[{i}]", rtol, atol)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}[{key!r}]", rtol, atol)
    elif isinstance(expected, float):
        assert (math.isnan(actual) and math.isnan(expected)) or math.isclose(
            actual, expected, rel_tol=1e-5, abs_tol=1e-6
        ), f"{path}: {actual} != {expected}"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def compare_call(compiled, reference, args, rtol=None, atol=None):
    """Run eager on a copy of the arguments, the compiled program on the originals;
    compare results and the arguments afterwards (in-place mutations)."""
    call = as_args(args)
    eager_call = fresh_copy(call)
    expected = reference(*eager_call.args, **eager_call.kwargs)
    actual = compiled(*call.args, **call.kwargs)
    assert_same(actual, expected, "result", rtol, atol)
    assert_same(call.args, eager_call.args, "arguments after the call", rtol, atol)
    assert_same(call.kwargs, eager_call.kwargs, "keyword arguments after the call", rtol, atol)
    return actual


def check_fn(
    fn: Callable,
    make_args: Callable[[int], Any],
    *,
    graphs: int = 1,
    recompiles: int | None = None,
    calls: int = 2,
    rtol=None,
    atol=None,
) -> RecordingBackend:
    """Compile ``fn``, run it on ``calls`` fresh argument sets (``make_args(i)``)
    next to eager, and check that exactly ``graphs`` graphs were captured, no
    frame fell back, and every call after a capture was served from the cache."""
    backend = RecordingBackend()
    compiled = surge.compile(fn, backend=backend)
    delta = CounterDelta()
    for i in range(calls):
        compare_call(compiled, fn, make_args(i), rtol, atol)
    assert delta["fallbacks"] == 0, f"unexpected fallback: {delta}"
    assert len(backend.graphs) == graphs, f"captured {len(backend.graphs)} graphs, expected {graphs}"
    assert delta["graphs"] == graphs, f"counters: {delta}"
    expected_recompiles = graphs - 1 if recompiles is None else recompiles
    assert delta["recompiles"] == expected_recompiles, f"counters: {delta}"
    assert delta["cache_hits"] == calls - graphs, f"counters: {delta}"
    assert delta["cache_misses"] == graphs, f"counters: {delta}"
    return backend


def check_fallback(fn: Callable, make_args: Callable[[int], Any], *, calls: int = 2) -> None:
    """The frame cannot be captured: it must run eagerly, give eager's results,
    hand no graph to the backend, and be counted in ``fallbacks``."""
    backend = RecordingBackend()
    compiled = surge.compile(fn, backend=backend)
    delta = CounterDelta()
    for i in range(calls):
        compare_call(compiled, fn, make_args(i))
    assert backend.graphs == [], "a frame that fell back must not hand a graph to the backend"
    assert delta["graphs"] == 0, f"counters: {delta}"
    # Whether the second call retries capture or remembers the verdict is the
    # frontend's choice; at least one fallback and at most one per call.
    assert 1 <= delta["fallbacks"] <= calls, f"counters: {delta}"


def line_of(fn: Callable, marker: str) -> int:
    """The absolute line number of the first source line of ``fn`` containing ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    for offset, text in enumerate(lines):
        if marker in text:
            return start + offset
    raise AssertionError(f"marker {marker!r} not found in {fn.__name__}")


def location_of(fn: Callable, marker: str) -> str:
    """``file.py:line`` of the marked line, as surge's messages name user code."""
    return f"{os.path.basename(inspect.getsourcefile(fn))}:{line_of(fn, marker)}"


def check_module(
    module: torch.nn.Module,
    make_args: Callable[[int], Any],
    *,
    graphs: int = 1,
    calls: int = 2,
    train_step: bool = True,
    rtol=None,
    atol=None,
) -> tuple[torch.nn.Module, RecordingBackend]:
    """Compile a module; check results against the original on fresh inputs, the
    shared parameters and state_dict, gradients, and that an optimizer step taken
    through the compiled module changes the original (and is seen by later calls)."""
    backend = RecordingBackend()
    compiled = surge.compile(module, backend=backend)
    assert isinstance(compiled, torch.nn.Module)
    assert list(compiled.state_dict()) == list(module.state_dict()), "state_dict keys differ"
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in module.parameters()]
    delta = CounterDelta()
    for i in range(calls):
        compare_call(compiled, module, make_args(i), rtol, atol)
    assert delta["fallbacks"] == 0, f"unexpected fallback: {delta}"
    assert len(backend.graphs) == graphs, f"captured {len(backend.graphs)} graphs, expected {graphs}"
    assert delta["cache_hits"] == calls - graphs, f"counters: {delta}"

    params = [p for p in module.parameters() if p.requires_grad]
    if train_step and params:
        check_gradients_and_step(compiled, module, params, make_args(calls), rtol, atol)
        # After the in-place update, later calls must see the new weights.
        compare_call(compiled, module, make_args(calls + 1), rtol, atol)
        assert len(backend.graphs) == graphs, "an in-place parameter update must not recompile"
    return compiled, backend


def tensor_leaves(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in tensor_leaves(item)]
    return []


def scalar_loss(output) -> torch.Tensor:
    return sum(leaf.float().sum() for leaf in tensor_leaves(output) if leaf.requires_grad)


def check_gradients_and_step(compiled, module, params, args, rtol, atol) -> None:
    call = as_args(args)
    eager_call = fresh_copy(call)
    eager_grads = torch.autograd.grad(
        scalar_loss(module(*eager_call.args, **eager_call.kwargs)), params, allow_unused=True
    )
    compiled_grads = torch.autograd.grad(
        scalar_loss(compiled(*call.args, **call.kwargs)), params, allow_unused=True
    )
    for i, (c, e) in enumerate(zip(compiled_grads, eager_grads)):
        assert (c is None) == (e is None), f"gradient {i}: None-ness differs"
        if e is not None:
            torch.testing.assert_close(c, e, rtol=rtol, atol=atol)

    # An SGD step over compiled.parameters() moves the original's parameters by their
    # gradients (they are the same tensors); a plain sum may give zero gradients (softmax).
    before = [p.detach().clone() for p in params]
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.1)
    optimizer.zero_grad()
    scalar_loss(compiled(*fresh_copy(call).args, **fresh_copy(call).kwargs)).backward()
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    optimizer.step()
    assert any(g is not None for g in grads), "backward through the compiled module reached none of the original's parameters"
    for old, grad, param in zip(before, grads, params):
        if grad is not None:
            torch.testing.assert_close(param.detach(), old - 0.1 * grad)


def randn(*shape, requires_grad: bool = False, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).requires_grad_(requires_grad)


def run_printing(thunk):
    """(result, printed text) of ``thunk()``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = thunk()
    return result, out.getvalue()


def check_graph_breaks(
    fn: Callable,
    make_args: Callable[[int], Any],
    *,
    graphs: int,
    breaks: int,
    calls: int = 2,
    rtol=None,
    atol=None,
) -> RecordingBackend:
    """Compile ``fn``, whose frame is split by graph breaks; run it on ``calls`` fresh
    argument sets next to eager and check results, arguments afterwards, and the
    printed output (text and order); that exactly ``graphs`` graphs and ``breaks``
    graph breaks were made in all (counted over every call, resume functions
    included) and that no frame fell back to eager."""
    backend = RecordingBackend()
    compiled = surge.compile(fn, backend=backend)
    delta = CounterDelta()
    for i in range(calls):
        call = as_args(make_args(i))
        eager_call = fresh_copy(call)
        expected, eager_printed = run_printing(lambda: fn(*eager_call.args, **eager_call.kwargs))
        actual, printed = run_printing(lambda: compiled(*call.args, **call.kwargs))
        assert_same(actual, expected, "result", rtol, atol)
        assert_same(call.args, eager_call.args, "arguments after the call", rtol, atol)
        assert printed == eager_printed, f"printed:\n{printed}\neager printed:\n{eager_printed}"
    assert delta["fallbacks"] == 0, f"unexpected fallback: {delta}"
    assert len(backend.graphs) == graphs, f"captured {len(backend.graphs)} graphs, expected {graphs}; {delta}"
    assert delta["graphs"] == graphs, f"counters: {delta}"
    assert delta["graph_breaks"] == breaks, f"{delta['graph_breaks']} graph breaks, expected {breaks}; {delta}"
    return backend
