"""The table of reduction kinds: what each one starts from, how partial results combine,
what the accumulated value becomes, and how a split reduction divides it.

Lowering, ``split_reduction`` and both code generators read this table; a generator
has one render rule per ``combine`` and per ``finalize`` (codegen/triton/kernel.py,
codegen/cpp/kernel.py), not one per kind. A new kind whose combine, finalize and
split rule exist is one row here; a new combine or finalize is one render rule per
generator (docs/backend.md, "Reductions").

The rules eager follows, written once:

- ``nan="propagate"`` (max, min): a NaN anywhere in a float row makes the result NaN.
- ``nan="extreme"`` (argmax, argmin): a NaN counts as both the largest and the smallest
  value: the position of the first NaN wins.
- ties: an index-tracking kind returns the first position of the extreme value.
- integer and bool rows have no NaN: the plain comparison decides.
"""
from __future__ import annotations

import dataclasses

import torch

# identities
ZERO, ONE, LOWEST, HIGHEST = "zero", "one", "lowest", "highest"


@dataclasses.dataclass(frozen=True)
class ReductionKind:
    name: str
    # the neutral element: the result of an empty row, and what masked lanes hold
    identity: str
    # how two partial results combine: "add", "mul", "max", "min", "or", "and", or
    # "moments" (mean and sum of squared deviations, each target in its own way)
    combine: str
    # what the accumulated value becomes: "value" (itself), "nonzero" (a bool: any/all
    # accumulate 0/1), "index" (the position of the extreme value: argmax/argmin),
    # "variance" (the second moment over ``rnumel - correction``)
    finalize: str = "value"
    # how split_reduction divides a huge row: "same" (the kind again over the partials),
    # "arg" (each chunk's extreme and its position, then the best chunk), "two_pass" (the
    # mean, then the squared deviations, both as split sums)
    split: str = "same"
    nan: str = "none"   # "propagate" or "extreme" (the module docstring)

    @property
    def tracks_index(self) -> bool:
        return self.finalize == "index"

    @property
    def compares_inputs(self) -> bool:
        """Its accumulator holds input elements as they are (argmax compares the values in
        their own dtype) rather than the values cast to the accumulator dtype."""
        return self.finalize == "index"

    def result_dtype(self, acc_dtype: torch.dtype) -> torch.dtype:
        """The dtype of the value a kernel computes for one row."""
        if self.finalize == "index":
            return torch.int64
        return acc_dtype

    def identity_value(self, dtype: torch.dtype):
        """The neutral element as a Python scalar of ``dtype``."""
        return identity_value(self.identity, dtype)


def identity_value(identity: str, dtype: torch.dtype):
    if identity == ZERO:
        return False if dtype == torch.bool else 0
    if identity == ONE:
        return True if dtype == torch.bool else 1
    low = identity == LOWEST
    if dtype.is_floating_point:
        return float("-inf") if low else float("inf")
    if dtype == torch.bool:
        return not low
    info = torch.iinfo(dtype)
    return info.min if low else info.max


REDUCTIONS: dict[str, ReductionKind] = {k.name: k for k in (
    ReductionKind("sum", ZERO, "add"),
    ReductionKind("prod", ONE, "mul"),
    ReductionKind("max", LOWEST, "max", nan="propagate"),
    ReductionKind("min", HIGHEST, "min", nan="propagate"),
    ReductionKind("argmax", LOWEST, "max", finalize="index", split="arg", nan="extreme"),
    ReductionKind("argmin", HIGHEST, "min", finalize="index", split="arg", nan="extreme"),
    ReductionKind("any", ZERO, "or", finalize="nonzero"),
    ReductionKind("all", ONE, "and", finalize="nonzero"),
    ReductionKind("var", ZERO, "moments", finalize="variance", split="two_pass"),
)}


def reduction_kind(name: str) -> ReductionKind:
    found = REDUCTIONS.get(name)
    if found is None:
        raise KeyError(f"unknown reduction kind {name!r}; the table has {sorted(REDUCTIONS)}")
    return found
