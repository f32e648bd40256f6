"""The pipeline of the torch-level graph the frontend hands to aot, before tracing.

It runs for every compiled graph, also one whose variants all come from the disk cache
(the cache key is the graph it leaves), so it imports none of the ATen passes. The
graph belongs to the frontend: a step that rewrites it returns a copy.
"""
from __future__ import annotations

from ..passes.pipeline import PassStep, Pipeline
from .causal_attention import use_causal_attention

TORCH_GRAPH = Pipeline("torch", (
    # attention masks that are the causal pattern become is_causal=True (before tracing,
    # so that the forward and the backward traced from the graph agree)
    PassStep("causal_attention", lambda gm, ctx: use_causal_attention(gm)),
))
