"""Host time of one call on a GPU: where surge's per-call microseconds go.

For small workloads the device finishes a kernel long before the host has issued
the next one, so a loop of calls without synchronization measures the host code:
guards, the aot runtime, the generated wrapper, allocations and launches. For
each workload this prints the microseconds per call of eager, surge and
torch.compile (calls back to back, the device synchronized once at the end), whether
each of surge's kernels launches through its direct path (not Triton's per-call
argument binding), and a cProfile of surge's calls by own time.

    python bench/gpu_call_overhead.py [--workloads pointwise_chain_60,softmax] [--scale quick] [--calls 2000]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import surge  # noqa: E402
from surge.runtime import launcher  # noqa: E402
from surge.tools import workloads  # noqa: E402


def host_us(fn, calls: int) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def recording_launchers() -> list:
    """Every launcher made from now on (to ask afterwards how each launched)."""
    made = []
    original = launcher.make_launcher

    def recorded(*args, **kwargs):
        launch = original(*args, **kwargs)
        made.append(launch)
        return launch

    launcher.make_launcher = recorded
    return made


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", default="pointwise_chain_60,softmax,gpt_block")
    parser.add_argument("--scale", default="full", choices=workloads.SCALES)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    launchers = recording_launchers()
    for name in args.workloads.split(","):
        inst = workloads.build(name, "cuda", args.scale)
        inputs = inst.make_inputs(0)
        targets = {k: inst.fresh_target() for k in ("eager", "surge", "torch.compile")}
        del launchers[:]
        compiled = {"eager": targets["eager"], "surge": surge.compile(targets["surge"]),
                    "torch.compile": torch.compile(targets["torch.compile"])}
        calls = {k: (lambda k=k: inst.run(compiled[k], targets[k], inputs)) for k in compiled}
        for fn in calls.values():
            fn()
        times = {k: host_us(fn, args.calls) for k, fn in calls.items()}
        directs = [ln.state.get("direct") for ln in launchers]
        direct = sum(1 for d in directs if d is not None)
        c_launch = sum(1 for d in directs if getattr(d, "calls_c_launch", False))
        print(f"== {name}: host us/call " + ", ".join(f"{k} {v:.1f}" for k, v in times.items())
              + f"; surge kernels launching directly: {direct} of {len(launchers)}"
              + f" ({c_launch} through the C launch itself)")
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.calls):
            calls["surge"]()
        torch.cuda.synchronize()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.rows)


if __name__ == "__main__":
    main()
