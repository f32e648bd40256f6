"""What the memory plan costs per call on the cpp backend: host time, allocator calls, peak.

For each workload (one thread, ``--scale`` sizes) every compiled ATen graph's ``call(args)``
is timed alone (the minimum over rounds of ``--inner`` calls, forward and backward for
training), and one whole step runs under ``torch.profiler``'s memory events, which give
the allocator calls of the step (allocations, extern results included) and its peak: the
running sum of allocations and frees from the step's start.

    PYTHONPATH=. python bench/memory_plan.py [--only gpt_bundled,mlp_train] [--scale quick]

Run it with another checkout on ``PYTHONPATH`` (a copy of this file outside the tree) to
compare two versions of the plan.
"""
from __future__ import annotations

import argparse
import time

import torch

import surge
from surge.backends import pipeline
from surge.backends.executable import Executable
from surge.tools import workloads

DEFAULT = "pointwise_chain_60,layernorm_gelu,gpt_block,gpt_bundled,llama_bundled,mlp_train,hf_llama_train"


def record_graphs() -> list:
    """[executable, arguments of its last call, its own call] for every cpp graph compiled from now on."""
    graphs = []

    def wrap(graph):
        entry = [graph, None, graph.call]

        def remembering(args, entry=entry):
            entry[1] = list(args)
            return entry[2](args)

        graph.call = remembering
        graphs.append(entry)

    def recording(maker):
        def recorded(*a, **k):
            out = maker(*a, **k)
            for graph in (out if isinstance(out, list) else [out]):
                if isinstance(graph, Executable) and graph.target == "cpp":
                    wrap(graph)
            return out
        return recorded

    for maker in ("compile_graphs", "load_artifact"):
        setattr(pipeline, maker, recording(getattr(pipeline, maker)))
    return graphs


def min_seconds(fn, rounds: int, inner: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def allocations_and_peak(step) -> tuple:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return sum(1 for e in events if e.nbytes() > 0), peak


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default=DEFAULT)
    p.add_argument("--scale", default="quick", choices=workloads.SCALES)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--inner", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    graphs = record_graphs()
    print(f"torch {torch.__version__}, scale {args.scale}, one thread")
    for name in args.only.split(","):
        inst = workloads.build(name, "cpu", args.scale)
        inputs = inst.make_inputs(1)
        first = len(graphs)
        compiled = surge.compile(inst.fresh_target(), backend="cpp", options={"graph_cache": False})
        step = lambda: inst.run(compiled, compiled, inputs)   # noqa: E731
        for _ in range(3):
            step()
        mine = graphs[first:]
        host = []
        with torch.no_grad():
            for graph, last, call in mine:
                host.append(min_seconds(lambda call=call, last=last: call(list(last)), args.rounds, args.inner))
        calls, peak = allocations_and_peak(step)
        plans = [g.schedule.memory for g, _, _ in mine if g.schedule is not None]
        arena = [getattr(m, "arena", None) for m in plans]
        slots = sum(len(a.slots) for a in arena if a is not None)
        print(f"{name:22s} host {' + '.join(f'{t * 1e6:.1f}' for t in host)} us   "
              f"step: {calls} allocations, peak {peak / 2**20:.2f} MiB   "
              f"plan: {sum(m.allocations for m in plans)} storages, {slots} in arenas")


if __name__ == "__main__":
    main()
