"""``aten._foreach_*`` ops as one per-tensor op per list element.

torch's multi-tensor optimizers (``foreach=True``) and ``clip_grad_norm_`` call
``_foreach_<op>`` over lists of tensors: one call updates every parameter. The
core set has no list ops, so each call is traced as the per-tensor op it applies
element by element (``_foreach_mul_(xs, 0.9)`` -> ``mul_(x, 0.9)`` for each ``x``).
In-place forms stay in-place per tensor, so functionalization writes each
parameter and state tensor back with its own ``copy_``; lowering then fuses each
tensor's chain of updates into one kernel, as it fuses any pointwise chain.

How an argument is spread over the elements follows the overload's schema:
``Tensor[]`` and ``Scalar[]`` arguments give element ``i``; a ``Tensor scalars``
argument (``_foreach_addcdiv_.Tensor``: one number per element, held in a tensor)
gives ``scalars[i]``; anything else (a Scalar, a 0-d ``Tensor other``) is passed
to every element. Per-element values that eager reads into Python numbers (the
``value`` of ``addcdiv``/``addcmul`` held in a tensor) are computed as tensor ops
instead, in eager's order: ``self + (value * tensor1) / tensor2``.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

PREFIX = "_foreach_"
# The per-tensor op of a foreach op where its name is not the foreach name without the prefix.
_PER_TENSOR_NAMES = {"norm": "linalg_vector_norm"}
# Ops whose fourth argument is the per-tensor op's keyword ``value``.
_VALUE_OPS = {"addcdiv": aten.div, "addcmul": aten.mul}


def is_foreach(func) -> bool:
    return func._schema.name.split("::", 1)[1].startswith(PREFIX)


def _spread(argument, value, i: int):
    kind = str(argument.type)
    if kind.startswith(("List[", "Tensor[]", "Scalar[]")) or kind.endswith("[]"):
        return value[i]
    if argument.name == "scalars" and isinstance(value, torch.Tensor):
        return value[i]
    return value


def _elements(func, args, kwargs) -> int:
    for argument, value in zip(func._schema.arguments, list(args) + [kwargs.get(a.name) for a in
                                                                      func._schema.arguments[len(args):]]):
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            return len(value)
    raise ValueError(f"{func} has no list of tensors")


def decompose_foreach(func, args, kwargs):
    """Run ``func`` as per-tensor ATen ops (on the tracer's tensors); its foreach result."""
    name = func._schema.name.split("::", 1)[1][len(PREFIX):]
    in_place = name.endswith("_")
    base = name[:-1] if in_place else name
    schema = func._schema.arguments
    values = list(args) + [kwargs.get(a.name, a.default_value) for a in schema[len(args):]]
    n = _elements(func, args, kwargs)
    results = []
    for i in range(n):
        positional, keywords = [], {}
        for argument, value in zip(schema, values):
            item = _spread(argument, value, i)
            if argument.kwarg_only:
                keywords[argument.name] = item
            else:
                positional.append(item)
        results.append(_apply(base, in_place, positional, keywords))
    return None if in_place else results


def _apply(base: str, in_place: bool, positional: list, keywords: dict):
    if base in _VALUE_OPS:
        self, t1, t2 = positional[:3]
        value = positional[3] if len(positional) > 3 else 1
        if isinstance(value, torch.Tensor):
            term = _VALUE_OPS[base](aten.mul(value, t1), t2)
            return aten.add_(self, term) if in_place else aten.add(self, term)
        op = getattr(aten, base + "_" if in_place else base)
        return op(self, t1, t2, value=value)
    if base == "norm":
        self, ord_, dtype = (positional + [2, None])[:3] if len(positional) == 1 else (positional + [None])[:3]
        return aten.linalg_vector_norm(self, ord_, dtype=dtype)
    op = getattr(aten, _PER_TENSOR_NAMES.get(base, base) + ("_" if in_place else ""))
    return op(*positional, **keywords)
