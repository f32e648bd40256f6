"""The OpInfo sweep: every op of torch's OpInfo database through "aot_eager".

For each op (float32, CPU) the first sample that eager accepts is run as a
one-node torch-level graph through the aot_eager backend and compared with
eager: forward values (random ops under the same seed, so equal too), and, for
ops that support autograd, the gradients of every input that requires grad.

Each op ends in one of these outcomes:
  pass      forward (and gradients) equal to eager
  fallback  surge raised Unsupported and aot_eager ran the graph eagerly
  mismatch  a value or gradient differs from eager            (a bug)
  error     surge crashed with anything but Unsupported       (a bug)
  skip      no sample that eager runs (not counted)

``python -m tests.aot.opinfo_sweep`` runs every op and prints the table used in
docs/aot.md; the test runs a stable subset (see test_aot_opinfo.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import sys
import warnings

import torch
import torch.fx
from torch.utils import _pytree as pytree

from surge.aot import aot_compile
from surge.aot.backend import run_graph
from surge.errors import Unsupported
from surge.options import Options

from .helpers import single_op_graph

# OpInfo runs random ops under torch.manual_seed(42) inside the op
# (wrapper_set_seed); the sweep seeds the same way before eager and compiled calls,
# so random ops must match eager bit for bit.
SEED = 42
# Ops whose values are uninitialized memory: only shape and dtype are compared.
UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                           "empty_permuted"})
FORWARD_TOL = dict(rtol=1e-4, atol=1e-4, equal_nan=True)
GRAD_TOL = dict(rtol=1e-3, atol=1e-3, equal_nan=True)


@dataclasses.dataclass
class Outcome:
    name: str
    forward: str           # pass | fallback | mismatch | error | skip
    grad: str              # pass | fallback | mismatch | error | skip | n/a
    reason: str = ""


def all_ops():
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]


def stable_fraction(name: str, fraction: float) -> bool:
    """A deterministic subset: ops whose name hashes below ``fraction``."""
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:4], "little") / 2**32 < fraction


def op_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def first_sample(op, requires_grad: bool):
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=requires_grad):
        args = (sample.input,) + tuple(sample.args)
        try:
            torch.manual_seed(SEED)
            op.op(*_clone(args), **_clone(sample.kwargs))
        except Exception:
            continue
        return args, dict(sample.kwargs)
    return None


def _clone(tree, requires_grad=False):
    def one(x):
        if isinstance(x, torch.Tensor):
            c = x.detach().clone()
            return c.requires_grad_(x.requires_grad) if requires_grad else c
        return x
    return pytree.tree_map(one, tree)


def _compile(fn, args, kwargs):
    """aot_eager's compile; on Unsupported, the eager fallback and the reason."""
    gm, inputs = single_op_graph(fn, args, kwargs)
    try:
        return gm, aot_compile(gm, inputs, fw_compiler=run_graph, options=Options()), ""
    except Unsupported as e:
        # Run the torch-level graph node by node (OpInfo's lambdas have no
        # importable name, so gm's generated code cannot refer to them).
        return gm, torch.fx.Interpreter(gm).run, str(e).splitlines()[0][:150]


def _leaves(tree):
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def check_forward(op) -> tuple[str, str]:
    sample = first_sample(op, requires_grad=False)
    if sample is None:
        return "skip", "no sample runs in eager"
    args, kwargs = sample
    try:
        with torch.no_grad():
            _, compiled, fell_back = _compile(op.op, _clone(args), _clone(kwargs))
            torch.manual_seed(SEED)
            expected = op.op(*_clone(args), **_clone(kwargs))
            inputs = _leaves((_clone(args), _clone(kwargs)))
            torch.manual_seed(SEED)
            actual = compiled(*inputs)
    except Exception as e:  # noqa: BLE001 - the sweep records every failure
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"
    if op.name in UNINITIALIZED:
        # Their values are whatever memory held (NaN and inf included): compare
        # shapes, strides and dtypes through zero tensors laid out the same way.
        actual, expected = _zeros_like_leaves(actual), _zeros_like_leaves(expected)
    return _compare(actual, expected, FORWARD_TOL, fell_back)


def _zeros_like_leaves(value):
    if isinstance(value, torch.Tensor):
        return torch.zeros_like(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_zeros_like_leaves(v) for v in value)
    return value


def check_grad(op) -> tuple[str, str]:
    if not op.supports_autograd:
        return "n/a", ""
    sample = first_sample(op, requires_grad=True)
    if sample is None:
        return "skip", "no differentiable sample runs in eager"
    args, kwargs = sample

    def differentiated(*a, **k):
        # OpInfo's wrapper makes the loss well defined (e.g. eigenvector phases).
        return op.gradcheck_wrapper(op.op, *a, **k)

    eager_args, eager_kwargs = _clone(args, True), _clone(kwargs, True)
    leaves = [t for t in _leaves((eager_args, eager_kwargs)) if t.requires_grad]
    if not leaves:
        return "skip", "no input requires grad"
    try:
        torch.manual_seed(SEED)
        expected = differentiated(*eager_args, **eager_kwargs)
        outs = [o for o in _leaves(expected) if o.requires_grad]
        if not outs:
            return "skip", "no output requires grad"
        cotangents = [torch.randn(o.shape, dtype=o.dtype, generator=torch.Generator().manual_seed(1))
                      for o in outs]
        want = torch.autograd.grad(outs, leaves, cotangents, allow_unused=True)
    except Exception as e:  # noqa: BLE001 - eager cannot differentiate this sample
        return "skip", f"eager backward fails: {str(e).splitlines()[0][:100]}"
    try:
        c_args, c_kwargs = _clone(args, True), _clone(kwargs, True)
        _, compiled, fell_back = _compile(differentiated, c_args, c_kwargs)
        inputs = _leaves((c_args, c_kwargs))
        torch.manual_seed(SEED)
        actual = compiled(*inputs)
        c_outs = [o for o in _leaves(actual) if o.requires_grad]
        if len(c_outs) != len(outs):
            return "mismatch", f"{len(c_outs)} outputs require grad, eager has {len(outs)}"
        c_leaves = [t for t in inputs if t.requires_grad]
        got = torch.autograd.grad(c_outs, c_leaves, cotangents, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"
    return _compare(list(got), list(want), GRAD_TOL, fell_back)


def _compare(actual, expected, tol, fell_back) -> tuple[str, str]:
    a_flat, e_flat = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    if len(a_flat) != len(e_flat):
        return "mismatch", f"{len(a_flat)} outputs, eager has {len(e_flat)}"
    for a, e in zip(a_flat, e_flat):
        if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor) and (a is None) != (e is None):
            return "mismatch", f"output kinds differ: {type(a).__name__} vs {type(e).__name__}"
        if isinstance(e, torch.Tensor):
            if a.shape != e.shape or a.dtype != e.dtype:
                return "mismatch", f"shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(e.shape)}/{e.dtype}"
            try:
                torch.testing.assert_close(a.detach(), e.detach(), **tol)
            except AssertionError as err:
                return "mismatch", str(err).splitlines()[0][:150]
    return ("fallback", fell_back) if fell_back else ("pass", "")


def run_op(op) -> Outcome:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forward, f_reason = check_forward(op)
        grad, g_reason = check_grad(op)
    reasons = [f_reason] + ([g_reason] if g_reason and g_reason != f_reason else [])
    return Outcome(op_id(op), forward, grad, "; ".join(r for r in reasons if r))


def main() -> None:
    """Run every op; print the counts and the Markdown table of docs/aot.md.

    With ``--write-known`` also rewrite opinfo_known.py from the results.
    """
    import collections
    import pathlib
    import time

    start = time.time()
    outcomes = [run_op(op) for op in all_ops()]
    fwd = collections.Counter(o.forward for o in outcomes)
    grd = collections.Counter(o.grad for o in outcomes)
    print(f"ops: {len(outcomes)}  forward: {dict(fwd)}  gradient: {dict(grd)}  ({time.time() - start:.0f}s)")
    print("| op | forward | gradient | reason |\n| --- | --- | --- | --- |")
    flagged = [o for o in outcomes if o.forward not in ("pass", "skip") or o.grad not in ("pass", "skip", "n/a")]
    for o in flagged:
        print(f"| {o.name} | {o.forward} | {o.grad} | {o.reason.replace('|', '/')} |")
    if "--write-known" in sys.argv:
        lines = ['"""Ops of the OpInfo sweep that run eagerly (aot raised Unsupported), and why.',
                 "",
                 "Written by ``python -m tests.aot.opinfo_sweep --write-known``; mirrored in docs/aot.md.",
                 '"""', "", "KNOWN_FALLBACKS = {"]
        for o in flagged:
            if "fallback" in (o.forward, o.grad):
                lines.append(f"    {o.name!r}: {o.reason!r},")
        lines.append("}")
        path = pathlib.Path(__file__).with_name("opinfo_known.py")
        path.write_text("\n".join(lines) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
