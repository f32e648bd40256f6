"""The pass pipeline: one visible list of named graph-to-graph steps.

Each step takes the graph module and an explicit ``PassContext`` and returns the
(possibly same) graph module. The ``aot`` log channel prints the graph after each
step when it changed the node count.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch.fx

from .. import logs
from .constant_fold import fold_constants
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code


@dataclasses.dataclass(frozen=True)
class PassContext:
    # Keep unused random ops (their RNG draws) for results bit-identical to eager.
    keep_random: bool = False
    graph_name: str = "graph"


@dataclasses.dataclass(frozen=True)
class PassStep:
    name: str
    run: Callable[[torch.fx.GraphModule, PassContext], torch.fx.GraphModule]


DEFAULT_PIPELINE: tuple[PassStep, ...] = (
    PassStep("dce", lambda gm, ctx: eliminate_dead_code(gm, keep_random=ctx.keep_random)),
    PassStep("cse", lambda gm, ctx: eliminate_common_subexpressions(gm)),
    PassStep("constant_fold", lambda gm, ctx: fold_constants(gm)),
    PassStep("dce_after_fold", lambda gm, ctx: eliminate_dead_code(gm, keep_random=ctx.keep_random)),
)


def run_pipeline(gm: torch.fx.GraphModule, ctx: PassContext = PassContext(),
                 steps: tuple[PassStep, ...] = DEFAULT_PIPELINE) -> torch.fx.GraphModule:
    for step in steps:
        before = len(gm.graph.nodes)
        gm = step.run(gm, ctx)
        after = len(gm.graph.nodes)
        if after != before:
            logs.log("aot", f"{ctx.graph_name}: pass {step.name}: {before} -> {after} nodes")
    return gm
