"""Pipelines: one visible list of named graph-to-graph steps per IR level, and their runner.

A ``Pipeline`` names its IR level (``aten_forward``, ``loop_ir``, ...), lists its
``PassStep``s and says how to print and measure a graph of that level. Each step
takes the graph and an explicit ``PassContext`` and returns a graph: the same object
when it edited a graph the pipeline owns (the ATen graphs aot has just traced), or a
new one when the graph belongs to someone else (the frontend's torch-level graph, a
loop graph lowering returned). A step never edits a graph its caller keeps.

The runner is the one place that observes steps: under ``SURGE_DEBUG_DIR`` it dumps
the graph after every step (``{level}.{k}_{step}.{ext}`` in the compile's folder,
``observe/debug_dir.py``), and the ``aot`` log channel prints which steps changed
the graph's size. Every level's pipeline is listed in docs/observability.md.
This module imports no pass: a process that loads compiled graphs from the disk cache
runs the torch-level pipeline and nothing else (``cleanup.py`` holds the ATen steps).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch.fx

from .. import logs
from ..observe.debug_dir import write_current


@dataclasses.dataclass(frozen=True)
class PassContext:
    # Keep unused random ops (their RNG draws) for results bit-identical to eager.
    keep_random: bool = False
    graph_name: str = "graph"
    # The compile's Options: the dump hook writes into its debug dir; steps read what
    # they need from it (never from globals).
    options: Any = None


@dataclasses.dataclass(frozen=True)
class PassStep:
    name: str
    run: Callable[[Any, PassContext], Any]


def fx_text(gm: torch.fx.GraphModule) -> str:
    return gm.print_readable(print_output=False)


def fx_size(gm: torch.fx.GraphModule) -> int:
    return len(gm.graph.nodes)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """The steps of one IR level; ``render``/``size``/``suffix`` print and measure its graphs."""
    level: str
    steps: tuple[PassStep, ...]
    render: Callable[[Any], str] = fx_text
    size: Callable[[Any], int] = fx_size
    suffix: str = "py"
    unit: str = "nodes"      # what ``size`` counts, and the log channel that reports it
    channel: str = "aot"

    @property
    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]

    def dump_name(self, k: int, step: PassStep) -> str:
        return f"{self.level}.{k:02d}_{step.name}.{self.suffix}"


def run_pipeline(graph, ctx: PassContext, steps: "Pipeline | tuple[PassStep, ...]"):
    """Run ``steps`` in order on ``graph``; returns the last step's graph."""
    pipeline = steps if isinstance(steps, Pipeline) else Pipeline(ctx.graph_name, tuple(steps))
    for k, step in enumerate(pipeline.steps, 1):
        before = pipeline.size(graph)
        graph = step.run(graph, ctx)
        after = pipeline.size(graph)
        if after != before:
            logs.log(pipeline.channel, f"{ctx.graph_name}: pass {step.name}: {before} -> {after} {pipeline.unit}")
        if ctx.options is not None:
            write_current(ctx.options, pipeline.dump_name(k, step), lambda g=graph: pipeline.render(g))
    return graph
