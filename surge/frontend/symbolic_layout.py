"""Layout predicates of tensors with symbolic sizes, as torch's SymNode protocol asks them.

C++ asks a symbolic tensor whether it is contiguous, channels-last or dense
(``SizeNode.is_contiguous`` and the like, shape_env.py); each answer is a chain of
conditions on sizes and strides, every one decided by the shape environment (a
fact where it is not decided statically).
"""
from __future__ import annotations

from .symbolic import Expr, Rel


def _expr(value) -> Expr:
    """The expression of a SymInt, a SizeNode or a number."""
    node = getattr(value, "node", value)
    found = getattr(node, "expr", None)
    return found if isinstance(found, Expr) else Expr.const(value)


def _truth(env, a, op: str, b, why: str) -> bool:
    return env.assume(Rel.compare(op, _expr(a), _expr(b)), why)


def contiguous_in_order(env, sizes, strides, order) -> bool:
    """Dense in ``order`` (innermost first), ignoring dims of size 1."""
    why = "the tensor's layout"
    if any(_truth(env, s, "==", 0, why) for s in sizes):
        return True
    return _dense_in(env, sizes, strides, order, why)


def _dense_in(env, sizes, strides, order, why) -> bool:
    """Each dim's stride the product of the sizes inside it, in ``order`` (size-1 dims skipped)."""
    expected = Expr.const(1)
    for d in order:
        if _truth(env, sizes[d], "==", 1, why):
            continue
        if not env.assume(Rel("==", _expr(strides[d]) - expected), why):
            return False
        expected = expected * _expr(sizes[d])
    return True


def channels_last_strides(env, sizes, strides, order) -> bool:
    """Whether strides order the dims as channels-last does (torch's heuristic of the same name)."""
    why = "the tensor's memory format"
    if _truth(env, strides[1], "==", 0, why):
        return False
    low = Expr.const(0)
    for d in order:
        stride = _expr(strides[d])
        if env.assume(Rel("<", stride - low), why):
            return False
        if d == 0 and env.assume(Rel("==", low - _expr(strides[1])), why):
            return False
        low = stride
        if _truth(env, sizes[d], ">", 1, why):
            low = low * _expr(sizes[d])
    return True


def non_overlapping_and_dense(env, sizes, strides) -> bool:
    why = "the tensor's layout"
    n = len(sizes)
    if n == 1:
        return _truth(env, sizes[0], "<", 2, why) or _truth(env, strides[0], "==", 1, why)
    order = list(range(n))
    # Insertion sort by stride (size-1 dims last), each comparison a condition on sizes.
    for i in range(1, n):
        j = i
        while j > 0 and _stride_before(env, sizes, strides, order[j], order[j - 1], why):
            order[j], order[j - 1] = order[j - 1], order[j]
            j -= 1
    return _dense_in(env, sizes, strides, order, why)


def _stride_before(env, sizes, strides, a, b, why) -> bool:
    a_one, b_one = _truth(env, sizes[a], "==", 1, why), _truth(env, sizes[b], "==", 1, why)
    if a_one or b_one:
        return b_one and not a_one
    return _truth(env, strides[a], "<", strides[b], why)


