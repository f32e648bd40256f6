"""The ways a test method is run: each variant turns the method into a callable
taking the test instance, once for the eager run and once compiled by surge.

- ``plain``: the method itself is the compiled frame (``surge.compile(method)``).
  Most of CPython's tests do no tensor work, so this exercises the frontend's
  Python semantics: surge captures no graph, breaks where it must, and every
  observable result has to be eager's.
- ``graph``: the method's source is rewritten to start with tensor work
  (``torch.sin``) and to end by appending a tensor computed from it to a list
  the runner checks: the method's Python runs in a frame that has a graph, with a
  tensor alive across its graph breaks, and the list is a side effect to replay.
- ``tensor_int``: the method's source is rewritten so that small integer literals
  are read from 0-d tensors (``int(torch.tensor(3).add(0))``): every one is a
  graph with a data-dependent break after it, in the middle of the test's logic.
"""
from __future__ import annotations

import ast
import inspect
import types
from typing import Callable

import torch

import surge

VARIANTS = ("plain", "graph", "tensor_int")
BACKEND = "eager"
# tensor_int rewrites at most this many literals per method: every one is a graph
# break, and a break in a loop body is taken on each iteration.
MAX_TENSOR_INTS = 8


class VariantUnavailable(Exception):
    """This variant cannot be built for this method (e.g. no parseable source)."""


def build(variant: str, fn: Callable, compiled: bool) -> Callable:
    """A callable(test_instance) running ``fn`` as ``variant``, compiled or eager."""
    if variant == "plain":
        return surge.compile(fn, backend=BACKEND) if compiled else fn
    if variant == "graph":
        return _with_tensor_work(fn, compiled)
    if variant == "tensor_int":
        transformer = _IntLiterals(MAX_TENSOR_INTS)
        rewritten = rewrite_method(fn, transformer.visit)
        if transformer.left == MAX_TENSOR_INTS:
            raise VariantUnavailable("no small int literal to rewrite")
        return surge.compile(rewritten, backend=BACKEND) if compiled else rewritten
    raise ValueError(f"unknown variant {variant!r}; known: {VARIANTS}")


_PROLOGUE = "_surge_t = torch.sin(torch.arange(3.0))"
_EPILOGUE = "_surge_seen.append(_surge_t + 1)"


def _with_tensor_work(fn: Callable, compiled: bool) -> Callable:
    seen: list = []

    def add_tensor_work(func: ast.FunctionDef) -> ast.FunctionDef:
        body = func.body
        docstring = body[:1] if body and isinstance(body[0], ast.Expr) and isinstance(
            body[0].value, ast.Constant) else []
        prologue = _relocate(ast.parse(_PROLOGUE).body[0], body[0])
        epilogue = _relocate(ast.parse(_EPILOGUE).body[0], body[-1])
        func.body = [*docstring, prologue, *body[len(docstring):], epilogue]
        return func

    rewritten = rewrite_method(fn, add_tensor_work, _surge_seen=seen)
    target = surge.compile(rewritten, backend=BACKEND) if compiled else rewritten
    expected = torch.sin(torch.arange(3.0)) + 1

    def run(test):
        seen.clear()
        try:
            return target(test)
        finally:
            if any(not torch.equal(t, expected) for t in seen) or len(seen) > 1:
                raise AssertionError(f"the tensor the method appended: {seen} != [{expected}]")

    return run


class _IntLiterals(ast.NodeTransformer):
    """Small int literals -> ``int(torch.tensor(N).add(0))``, outside match patterns
    and f-string format specs (which must stay literals)."""

    def __init__(self, limit: int):
        self.left = limit

    def visit_match_case(self, node):
        node.body = [self.visit(stmt) for stmt in node.body]
        if node.guard is not None:
            node.guard = self.visit(node.guard)
        return node

    def visit_FormattedValue(self, node):
        node.value = self.visit(node.value)
        return node

    def visit_Constant(self, node):
        value = node.value
        if type(value) is not int or not 0 <= value <= 9 or self.left <= 0:
            return node
        self.left -= 1
        tensor = ast.parse(f"int(torch.tensor({value}).add(0))", mode="eval").body
        return _relocate(tensor, node)


def _relocate(tree: ast.AST, at: ast.AST) -> ast.AST:
    for sub in ast.walk(tree):
        for field in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
            if hasattr(at, field):
                setattr(sub, field, getattr(at, field))
    return tree


def rewrite_method(fn: Callable, transform: Callable[[ast.FunctionDef], ast.FunctionDef],
                   **extra_cells) -> Callable:
    """``fn`` recompiled from its source after ``transform`` of its ``def``. The new
    function shares ``fn``'s globals (so ``global`` statements act on the real module),
    keeps its line numbers, and gets ``fn``'s closure cells (``__class__`` for
    ``super()``), ``torch`` and ``extra_cells`` through an enclosing function."""
    if not isinstance(fn, types.FunctionType) or hasattr(fn, "__wrapped__"):
        raise VariantUnavailable("not a plain function (decorated)")
    try:
        lines, first_line = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise VariantUnavailable(f"no source: {e}") from None
    # Under an ``if 1:`` the def may keep its indentation: dedenting would fail on a
    # multi-line string less indented than the code.
    try:
        tree = ast.parse("if 1:\n" + "".join(lines))
    except SyntaxError as e:
        raise VariantUnavailable(f"source does not parse alone: {e}") from None
    func = tree.body[0].body[0]
    if not isinstance(func, ast.FunctionDef) or func.name != fn.__name__:
        raise VariantUnavailable("source is not a single def")
    func.decorator_list = []
    ast.increment_lineno(func, first_line - 2)
    func = transform(func)
    cell_names = ["torch", *extra_cells, *fn.__code__.co_freevars]
    outer = ast.FunctionDef(
        name="_outer", args=ast.arguments([], [ast.arg(n) for n in cell_names], None, [], [], None, []),
        body=[func, ast.Return(ast.Name(fn.__name__, ast.Load()))], decorator_list=[], returns=None,
        type_params=[],
    )
    module = ast.Module([_relocate_stmt(outer, func)], [])
    ast.fix_missing_locations(module)
    namespace: dict = {}
    exec(compile(module, inspect.getsourcefile(fn) or "<rewritten>", "exec"), fn.__globals__, namespace)
    cells = [c.cell_contents for c in (fn.__closure__ or ())]
    new = namespace["_outer"](torch, *extra_cells.values(), *cells)
    new.__qualname__ = fn.__qualname__
    new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def _relocate_stmt(outer: ast.FunctionDef, at: ast.AST) -> ast.FunctionDef:
    outer.lineno, outer.col_offset = at.lineno, 0
    outer.end_lineno, outer.end_col_offset = at.end_lineno, 0
    for stmt in outer.body[1:]:
        stmt.lineno = stmt.end_lineno = at.end_lineno
        stmt.col_offset = stmt.end_col_offset = 0
    return outer
