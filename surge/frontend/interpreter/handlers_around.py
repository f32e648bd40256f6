"""Whether a user handler could catch an exception raised at the instruction running now.

Torch ops whose errors depend on the tensors' values (a Cholesky factorisation of a
matrix that is not positive-definite, an index out of range in ``index_select``, a
negative probability in ``multinomial``) cannot be found on meta tensors: inside a
graph they would raise when the graph runs, past the user's ``except``. Such an op is
left to CPython (a graph break at it) when some frame of the trace runs it inside a
``try`` whose ``except`` may catch it, or inside a ``with`` block whose ``__exit__``
may swallow it. Handlers that re-raise — the unbinding of ``except E as e``, a
``finally`` body, the exits of grad-mode, autocast and profiler blocks — do not
count; the next handler out decides.
"""
from __future__ import annotations

import operator

import torch

# Instructions of a handler that only tidies up before re-raising.
_CLEANUP_ONLY = {"LOAD_CONST", "STORE_FAST", "DELETE_FAST", "COPY", "POP_EXCEPT", "SWAP", "POP_TOP", "NOP"}

# Names of torch functions and tensor methods whose errors depend on values.
VALUE_CHECKED_OPS = frozenset({
    "cholesky", "linalg_cholesky", "cholesky_ex", "cholesky_solve", "cholesky_inverse", "inverse",
    "linalg_inv", "solve", "linalg_solve", "lu", "lu_factor", "linalg_lu_factor", "lu_solve",
    "linalg_eig", "eig", "linalg_eigh", "eigh", "linalg_svd", "svd", "linalg_matrix_power",
    "multinomial", "bernoulli", "poisson",
    "index_select", "gather", "take", "take_along_dim", "scatter", "scatter_", "scatter_add",
    "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_add", "index_add_", "index_copy",
    "index_copy_", "index_fill", "index_fill_", "index_put", "index_put_", "put", "put_",
    "embedding", "one_hot", "bincount", "repeat_interleave", "nll_loss", "cross_entropy",
    "_assert_async", "_assert", "searchsorted", "histc", "segment_reduce",
})


def may_raise_on_values(target, args: list) -> bool:
    """Whether the op's errors depend on its inputs' values, not only their metadata."""
    from ..variables.tensor import TensorVariable

    if target in (operator.getitem, operator.setitem):
        # Indexing with an integer tensor checks each index against the size.
        index = args[1] if len(args) > 1 else None
        parts = index.items if hasattr(index, "items") and isinstance(index.items, list) else [index]
        return any(isinstance(p, TensorVariable) and not p.example.dtype.is_floating_point
                   and p.example.dtype is not torch.bool for p in parts)
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return name in VALUE_CHECKED_OPS


def _never_swallows(exit_fn) -> bool:
    from ..variables.autocast import AutocastContextVariable
    from ..variables.contexts import (
        BoundContextMethod, GradModeContextVariable, NullContextVariable, ProfilerContextVariable,
    )

    return isinstance(exit_fn, BoundContextMethod) and isinstance(
        exit_fn.ctx, (GradModeContextVariable, NullContextVariable, ProfilerContextVariable, AutocastContextVariable))


def _covering(frame, index: int):
    """The exception-table entry covering instruction ``index`` (entries do not overlap)."""
    return next((e for e in frame.decoded.exception_table if e.start <= index <= e.end), None)


def _reraise_after(frame, entry) -> int | None:
    """Where a handler that neither catches nor has effects re-raises, or None when it
    may catch or runs code of its own."""
    instructions = frame.instructions
    start = entry.target
    if instructions[start].opname == "PUSH_EXC_INFO":
        following = instructions[start + 1] if start + 1 < len(instructions) else None
        if following is None or following.opname != "WITH_EXCEPT_START":
            return _finally_reraise(instructions, start)
        exit_fn = frame.stack[entry.depth - 1] if 0 < entry.depth <= len(frame.stack) else None
        if not _never_swallows(exit_fn):
            return None
        start += 2
        allowed = _CLEANUP_ONLY | {"POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_IF_TRUE"}
    else:
        allowed = _CLEANUP_ONLY
    for inst in instructions[start:]:
        if inst.opname == "RERAISE":
            return inst.index
        if inst.opname not in allowed:
            return None
    return None


def _finally_reraise(instructions, start: int) -> int | None:
    """Where a ``finally`` handler re-raises, or None for an ``except`` clause (it tests
    the exception or leaves the handler) and a ``finally`` that may swallow it (a
    ``return`` in it). The body of a ``finally`` runs its own code before the exception
    goes on; if the op raises only when the graph runs, that code does not run: an
    accepted difference for errors that end the call anyway (model code wraps its
    forward in such blocks, which would otherwise split every model)."""
    depth = 0
    for inst in instructions[start + 1:]:
        op = inst.opname
        if op == "PUSH_EXC_INFO":
            depth += 1
        elif op == "POP_EXCEPT":
            if depth == 0:
                return None
            depth -= 1
        elif depth == 0 and op in ("CHECK_EXC_MATCH", "RETURN_VALUE", "RETURN_CONST"):
            return None
        elif depth == 0 and op == "RERAISE":
            return inst.index
    return None


def user_handler_around(tx) -> bool:
    """Whether any frame of the trace runs its current instruction under a handler that
    may catch an exception, or run code of its own, before it leaves the trace."""
    frame = tx.current_frame
    while frame is not None:
        index = frame.current.index if frame.current is not None else None
        for _ in range(16):  # cleanups re-raise into the next handler out
            entry = _covering(frame, index) if index is not None else None
            if entry is None:
                break
            index = _reraise_after(frame, entry)
            if index is None:
                return True
        frame = frame.parent
    return False


def value_checked_op_in_try(tx, target, args: list) -> bool:
    return may_raise_on_values(target, args) and user_handler_around(tx)
