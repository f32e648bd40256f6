"""The arena against one allocation per buffer, side by side in one process (cpp backend).

Each workload (one thread, ``--scale`` sizes; ``softmax_chain``, defined here, is a graph
of many small intermediates that only kernels read) runs once through ``surge.compile``; every
ATen graph the pipeline compiled is compiled again for a target whose
``arena_buffer_limit`` is 0 (no buffer in the arena: each storage the plan allocates is
an allocation of its own, the host code as it was before the arena). Then, per graph:

- host time of ``call(args)`` (the minimum over rounds of ``--inner`` calls, the two
  versions interleaved call by call: the machine's noise hits both alike);
- allocator calls and peak of one call, from ``torch.profiler``'s memory events (the
  running sum of allocations and frees from the call's start; extern results included).

    PYTHONPATH=. python bench/memory_plan.py [--only gpt_bundled,mlp_train] [--scale quick]
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import torch

import surge
from surge.backends import pipeline
from surge.tools import workloads

DEFAULT = "softmax_chain,pointwise_chain_60,layernorm_gelu,gpt_block,gpt_bundled,llama_bundled,hf_llama_infer,mlp_train"


def softmax_chain(x):
    """Ten softmaxes, each over the other dim of the last one's result: ten kernels, each
    result read only by the next kernel (transposed: no fusion), one per-row max and sum
    stored per kernel."""
    for _ in range(10):
        x = torch.softmax(x.t() * 1.5, -1)
    return x


class SoftmaxChain:
    """``softmax_chain`` on [64, 48] floats, as a workload instance."""

    def __init__(self):
        self.x = torch.randn(64, 48)

    def make_inputs(self, seed):
        return (self.x,)

    def fresh_target(self):
        return softmax_chain

    def run(self, fn, _module, inputs):
        return fn(*inputs)


def build(name: str, scale: str):
    return SoftmaxChain() if name == "softmax_chain" else workloads.build(name, "cpu", scale)


def record_compiles() -> list:
    """[(graphs, target, config, executables)] of every pipeline compile from now on."""
    compiles = []
    compile_graphs = pipeline.compile_graphs

    def recorded(graphs, target, config):
        out = compile_graphs(graphs, target, config)
        compiles.append((list(graphs), target, config, out))
        return out

    pipeline.compile_graphs = recorded
    return compiles


def remember_arguments(executable) -> list:
    """The arguments of the executable's next call, kept (``call`` empties its list)."""
    kept, call = [], executable.call

    def remembering(args):
        kept[:] = list(args)
        return call(args)

    executable.call = remembering
    return kept


def allocations_and_peak(fn) -> tuple:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return sum(1 for e in events if e.nbytes() > 0), peak


def interleaved_min(fns: dict, rounds: int, inner: int) -> dict:
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / inner)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default=DEFAULT)
    p.add_argument("--scale", default="quick", choices=workloads.SCALES)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--inner", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    compiles = record_compiles()
    print(f"torch {torch.__version__}, scale {args.scale}, one thread; per graph: arena / no arena")
    for name in args.only.split(","):
        inst = build(name, args.scale)
        inputs = inst.make_inputs(1)
        first = len(compiles)
        compiled = surge.compile(inst.fresh_target(), backend="cpp", options={"graph_cache": False})
        inst.run(compiled, compiled, inputs)   # compiles on the first call
        pairs = []
        for graphs, target, config, executables in compiles[first:]:
            plain = pipeline.compile_graphs(graphs, dataclasses.replace(target, arena_buffer_limit=0), config)
            pairs += [(a, b, remember_arguments(a)) for a, b in zip(executables, plain) if hasattr(a, "call")]
        inst.run(compiled, compiled, inputs)   # records each graph's arguments
        for k, (arena, plain, kept) in enumerate(pairs):
            if not kept:
                continue
            calls = {"arena": lambda e=arena, kept=kept: e.call(list(kept)),
                     "none": lambda e=plain, kept=kept: e.call(list(kept))}
            with torch.no_grad():
                times = interleaved_min(calls, args.rounds, args.inner)
                (na, pa), (nb, pb) = allocations_and_peak(calls["arena"]), allocations_and_peak(calls["none"])
            slots = len(arena.memory["slots"])
            print(f"{name:16s} graph {k}: host {times['arena'] * 1e6:7.1f} / {times['none'] * 1e6:7.1f} us  "
                  f"allocations {na} / {nb}  peak {pa / 2**10:8.1f} / {pb / 2**10:8.1f} KiB  "
                  f"({slots} buffers in an arena of {arena.memory['arena_bytes']} bytes)")


if __name__ == "__main__":
    main()
