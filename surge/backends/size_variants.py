"""Variants of an ATen graph compiled for symbolic sizes: what runs when a guard breaks.

Lowering compiles a graph with symbolic sizes once for every size in range, except
where a choice needed a number: then it takes the answer at the hints (the sizes of
the call it was compiled for) and records a guard (``SizeVars.guard_*``, e.g. a slice
``x[:, :4]`` that needs ``4 <= s1``). The host code checks those guards at the start of
every call, before it touches its arguments, and raises ``SizeGuardFailed`` when one
breaks. ``SizeVariants`` is what the driver returns for such a graph: a short list of
compiled variants of the same graph, each with its own guards. A call runs the first
variant whose guards hold; when none does, a new variant is compiled with the failing
call's sizes as its hints (so its guards hold for that call by construction), logged
once under ``SURGE_LOGS=dynamic`` with the guard and the sizes. A graph that needs more
than ``MAX_VARIANTS`` runs its ATen ops as they are for further sizes (announced).
Most graphs never need a second variant: the code generators prefer forms that are
valid for every size (masked blocks, per-call parallelism) to guarded ones.
"""
from __future__ import annotations

import torch

from .. import fallbacks, logs
from ..counters import counters
from ..errors import SizeGuardFailed

MAX_VARIANTS = 8


def has_symbolic_sizes(gm: torch.fx.GraphModule) -> bool:
    """Whether an ATen graph's inputs carry symbolic sizes (on their traced values)."""
    from ..lowering.size_vars import has_symbolic_layout, is_symbolic_size

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if is_symbolic_size(val) or has_symbolic_layout(val):
                return True
    return False


class SizeVariants:
    """Callable as an ``Executable`` (boxed or not); its attributes are the first variant's."""

    def __init__(self, gm: torch.fx.GraphModule, first, compile_variant, options=None):
        self.gm = gm
        self.variants = [first]
        # (gm, concrete inputs of the failing call, variant number) -> Executable or gm.forward
        self.compile_variant = compile_variant
        self.options = options
        self._gave_up = False

    def __getattr__(self, name):
        if name in ("variants", "gm"):   # not set yet (unpickling, copying): no recursion
            raise AttributeError(name)
        return getattr(self.variants[0], name)

    def artifact(self):
        """Not stored in the compiled-graph cache: a stored module could not compile the
        variants its guards may call for (its ATen graph is not stored). The code cache,
        keyed by the symbolic form, still gives a new process the module without codegen."""
        return None

    def __call__(self, *args):
        return self.call_boxed(list(args))

    def call_boxed(self, args: list):
        count = len(args)
        failed = None
        for variant in self.variants:
            try:
                return _call(variant, args)
            except SizeGuardFailed as why:   # raised before the arguments were consumed
                del args[count:]              # the constants the variant appended
                failed = why
        return _call(self._new_variant(args, failed), args)

    def _new_variant(self, args: list, failed: SizeGuardFailed):
        sizes = _describe(args)
        if len(self.variants) >= MAX_VARIANTS:
            if not self._gave_up:
                self._gave_up = True
                fallbacks.announce(f"its sizes broke the guards of {MAX_VARIANTS} compiled variants "
                                   f"(last: {failed}); further such sizes run its ATen ops as they are",
                                   graph=True, options=self.options)
            return self.gm.forward
        logs.log("dynamic", f"sizes {sizes} break a guard of a graph compiled for symbolic sizes "
                            f"({failed}): compiling variant {len(self.variants) + 1} for them")
        counters["size_variants"] += 1
        variant = self.compile_variant(self.gm, list(args), len(self.variants))
        self.variants.append(variant)
        return variant


def _call(compiled, args: list):
    boxed = getattr(compiled, "call_boxed", None)
    if boxed is not None:
        return boxed(args)
    values = list(args)
    args.clear()
    return compiled(*values)


def _describe(args) -> str:
    return ", ".join(str(list(a.shape)) if isinstance(a, torch.Tensor) else repr(a) for a in args)
