"""The loop-IR step ``fused_forms``: several ops that one function computes in fewer
instructions, as accurately, become one op of ``op_groups.FUSED_FORM_OPS``.

- ``normal_cdf(x)``: ``0.5 * (1 + erf(x * sqrt(1/2)))`` in fp32, exact GELU's ``cdf``;
- ``one_plus_erf(z)``: ``1 + erf(z)`` in fp32 (GELU's, also where no 0.5 follows).

Every code generator renders each form as one function (Triton's device functions in
``codegen/triton/functions.py``, C++'s in ``codegen/cpp/prelude.py`` and in vector
lanes in ``codegen/cpp/vector16.py``), so the match is made once, here, on the loop
graph, and not again by each generator while it emits. A new form is a matcher below,
an entry of ``FUSED_FORM_OPS`` and one render rule per generator.

The step returns a new ``LoopGraph``: buffers whose value changed are new objects, the
others are shared with the graph it was given, which stays as it was.
"""
from __future__ import annotations

import dataclasses

import torch

from .ir import ComputedBuffer, LoopGraph
from .values import Constant, IndexCheck, Load, Masked, Op, walk

# Both code generators compute fp16 and bf16 in fp32: the forms' fits are fp32's.
_FP32_COMPUTED = (torch.float32, torch.float16, torch.bfloat16)

# outer op name -> matchers of an ``Op`` node returning (form name, operand values) or None
_MATCHERS: dict = {}


def _matcher(op: str):
    def register(match):
        _MATCHERS.setdefault(op, []).append(match)
        return match
    return register


def fused_form(v: Op):
    """(form name, its operands) when ``v`` computes a fused form, else None."""
    for match in _MATCHERS.get(v.op, ()):
        found = match(v)
        if found is not None:
            return found
    return None


def _is_constant(v, value: float) -> bool:
    return isinstance(v, Constant) and v.dtype.is_floating_point and abs(v.value - value) < 1e-12


def _operand_pairs(v: Op):
    """(a, b) and (b, a) of a commutative binary op."""
    return (v.children, v.children[::-1])


@_matcher("mul")
def _normal_cdf(v: Op):
    for half, one_plus in _operand_pairs(v):
        if not (_is_constant(half, 0.5) and isinstance(one_plus, Op) and one_plus.op == "add"):
            continue
        found = _one_plus_erf(one_plus)
        scaled = found[1][0] if found else None
        if isinstance(scaled, Op) and scaled.op == "mul" and v.dtype in _FP32_COMPUTED:
            for x, scale in _operand_pairs(scaled):
                if _is_constant(scale, 0.5 ** 0.5):
                    return "normal_cdf", [x]
    return None


@_matcher("add")
def _one_plus_erf(v: Op):
    for one, erf in _operand_pairs(v):
        if (_is_constant(one, 1.0) and isinstance(erf, Op) and erf.op == "erf"
                and v.dtype in _FP32_COMPUTED and erf.children[0].dtype in _FP32_COMPUTED):
            return "one_plus_erf", [erf.children[0]]
    return None


def with_fused_forms(root):
    """``root`` with every fused form it computes as one op (the same object when none)."""
    memo: dict[int, object] = {}
    changed = False
    for v in walk(root):
        if not v.children:
            memo[id(v)] = v
            continue
        form = fused_form(v) if isinstance(v, Op) else None
        if form is not None:
            name, operands = form
            memo[id(v)] = Op(name, [memo[id(c)] for c in operands], v.dtype)
            changed = True
            continue
        kids = [memo[id(c)] for c in v.children]
        if all(k is c for k, c in zip(kids, v.children)):
            memo[id(v)] = v
        elif isinstance(v, Load):
            memo[id(v)] = Load(v.buffer, v.index, v.dtype, [(s, k) for (s, _), k in zip(v.indirect, kids)])
        elif isinstance(v, Op):
            memo[id(v)] = Op(v.op, kids, v.dtype)
        elif isinstance(v, Masked):
            memo[id(v)] = Masked(kids[0], kids[1], v.other)
        elif isinstance(v, IndexCheck):
            memo[id(v)] = IndexCheck(kids[0], kids[1], v.error)
        else:
            raise TypeError(f"fused_forms: a {type(v).__name__} with operands")
    return memo[id(root)] if changed else root


def fuse_forms(graph: LoopGraph, ctx=None) -> LoopGraph:
    """The loop-IR step: ``graph`` with its fused forms as single ops (a new graph)."""
    buffers = []
    for buf in graph.buffers:
        if isinstance(buf, ComputedBuffer) and buf.value is not None:
            value = with_fused_forms(buf.value)
            if value is not buf.value:
                buf = dataclasses.replace(buf, value=value)
        buffers.append(buf)
    return dataclasses.replace(graph, buffers=buffers)
