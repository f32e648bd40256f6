"""``torch.ops.higher_order.cond`` in ATen graphs: both branches, selected by ``where``.

A torch-level graph (surge's frontend, or TorchDynamo's) calls
``cond(pred, true_gm, false_gm, operands)`` with two branch subgraphs. surge's ATen
graphs have no control flow, so the node is traced as both branches followed by one
``aten.where(pred, true_out, false_out)`` per output: exact values (``where`` picks
one side, whatever the other holds, inf and NaN included), everything fused and
generated like any other pointwise code, no host synchronisation on ``pred``. The
cost is running both branches, which is the right trade for the small branches
``torch.cond`` usually guards (a clamp, a rescale, a fallback formula); a branch
pair with large matmuls pays for both.

The backward is not the derivative of ``where`` (that would multiply the untaken
branch's local derivatives by zero, and ``0 * inf`` is NaN): a custom autograd
function computes each branch's vector-Jacobian product with the real incoming
gradient and selects between them with the same ``where``, so a gradient is exactly
that of the branch eager runs.

Branches must be pure: a random op would draw numbers eager does not draw, an
in-place op would write through the untaken branch. Those are refused
(``Unsupported``: the frame then runs eagerly, or ``fullgraph=True`` fails).
"""
from __future__ import annotations

import torch

from ..errors import Unsupported

COND = torch.ops.higher_order.cond
_RANDOM = ("rand", "randn", "randint", "randperm", "dropout", "bernoulli", "normal", "uniform",
           "multinomial", "exponential", "poisson", "rrelu")


def trace_cond(run_graph, pred, true_gm, false_gm, operands):
    """Trace one cond node; ``run_graph(gm, args)`` runs a subgraph on tracer tensors
    and returns its output tuple."""
    for gm in (true_gm, false_gm):
        _refuse_impure(gm)
    if not isinstance(pred, torch.Tensor):
        return run_graph(true_gm if pred else false_gm, list(operands))
    pred = pred.reshape(()) if pred.dim() else pred
    operands = list(operands)
    if torch.is_grad_enabled() and any(o.requires_grad for o in operands if isinstance(o, torch.Tensor)):
        return _SelectedBranches.apply(pred, run_graph, true_gm, false_gm, *operands)
    return _select(pred, run_graph(true_gm, operands), run_graph(false_gm, operands))


def _select(pred, true_outs, false_outs) -> tuple:
    if len(true_outs) != len(false_outs):
        raise Unsupported("the branches of torch.cond return different numbers of outputs")
    return tuple(torch.where(pred, a, b) for a, b in zip(true_outs, false_outs))


def _refuse_impure(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        name = name.split(".")[0]
        if any(name.lstrip("_").startswith(r) for r in _RANDOM):
            raise Unsupported(f"a random op ({name}) inside a branch of torch.cond (both branches are computed)")
        if name.endswith("_") and not name.endswith("__") and name != "_set_grad_enabled":
            raise Unsupported(f"an in-place op ({name}) inside a branch of torch.cond")


class _SelectedBranches(torch.autograd.Function):
    """Both branches forward; each branch's own vector-Jacobian product backward."""

    @staticmethod
    def forward(ctx, pred, run_graph, true_gm, false_gm, *operands):
        ctx.run_graph, ctx.branches = run_graph, (true_gm, false_gm)
        ctx.save_for_backward(pred, *operands)
        return _select(pred, run_graph(true_gm, list(operands)), run_graph(false_gm, list(operands)))

    @staticmethod
    def backward(ctx, *grads):
        pred, *operands = ctx.saved_tensors
        wanted = list(ctx.needs_input_grad[4:])
        per_branch = [_vjp(ctx.run_graph, gm, operands, wanted, grads) for gm in ctx.branches]
        result = []
        for i, (a, b) in enumerate(zip(*per_branch)):
            result.append(torch.where(pred, a, b) if wanted[i] else None)
        return (None, None, None, None, *result)


def _vjp(run_graph, gm, operands, wanted, grads) -> list:
    with torch.enable_grad():
        inputs = [o.detach().requires_grad_(w) if w else o for o, w in zip(operands, wanted)]
        outs = run_graph(gm, inputs)
        pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
        targets = [x for x, w in zip(inputs, wanted) if w]
        found = torch.autograd.grad([o for o, _ in pairs], targets, [g for _, g in pairs], allow_unused=True) \
            if pairs else [None] * len(targets)
    found = iter(found)
    out = []
    for x, w in zip(inputs, wanted):
        if not w:
            out.append(None)
            continue
        g = next(found)
        out.append(torch.zeros_like(x) if g is None else g)
    return out
