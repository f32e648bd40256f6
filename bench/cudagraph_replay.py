"""CUDA graph replays against the kernels they replay, on a GPU.

For each workload, surge in the default mode and in ``mode="reduce-overhead"``:

- ``kernels``: the sum of the device's own time of every kernel of one call (profiled in
  the default mode: what a replay cannot go below);
- ``replay``: the device time of one call in reduce-overhead (CUDA events around it);
  the goal is within 10% of ``kernels``;
- ``host``: microseconds of host time per call, calls back to back (guards, the aot
  runtime, the wrapper's checks and copies, one replay launch);
- ``peak``: peak memory of a few calls in each mode (the pool against the default mode).

    python bench/cudagraph_replay.py [--workloads gelu_stack_16,gpt2_b1_t8] [--scale full] [--calls 200]
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import surge  # noqa: E402
from surge.tools import workloads  # noqa: E402

DEFAULT_WORKLOADS = "gelu_stack_16,gpt2_b1_t8,gpt_block,mlp_train"


def _step(instance, compiled, target, inputs):
    return lambda: instance.run(compiled, target, inputs)


def kernel_seconds(step) -> float:
    """The summed device time of the kernels of one ``step()``."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / 1e6


def device_seconds(step, calls: int) -> float:
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def host_seconds(step, calls: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def measure(name: str, scale: str, calls: int) -> dict:
    instance = workloads.build(name, "cuda", scale)
    row = {}
    for mode in ("default", "reduce-overhead"):
        surge.reset()
        surge.counters.reset()
        gc.collect()
        torch.cuda.empty_cache()
        target = instance.fresh_target()
        inputs = instance.make_inputs(0)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        compiled = surge.compile(target, mode=mode)
        step = _step(instance, compiled, target, inputs)
        for _ in range(3):                     # warmup, recording, a replay
            step()
        torch.cuda.synchronize()
        row[f"peak_{mode}"] = torch.cuda.max_memory_allocated() - base
        if mode == "default":
            row["kernels"] = kernel_seconds(step)
        row[f"device_{mode}"] = device_seconds(step, calls)
        row[f"host_{mode}"] = host_seconds(step, calls)
        del compiled, target, step
    row["recorded"] = surge.counters["cudagraphs_recorded"]
    row["not_recorded"] = surge.counters["cudagraphs_not_recorded"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS)
    parser.add_argument("--scale", default="full", choices=workloads.SCALES)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(f"{'workload':18s} {'kernels':>9s} {'default':>9s} {'replay':>9s} {'replay/kern':>11s} "
          f"{'host dflt':>9s} {'host r-o':>9s} {'peak dflt':>10s} {'peak r-o':>10s}  recorded")
    for name in args.workloads.split(","):
        r = measure(name, args.scale, args.calls)
        print(f"{name:18s} {r['kernels'] * 1e3:8.3f}ms {r['device_default'] * 1e3:8.3f}ms "
              f"{r['device_reduce-overhead'] * 1e3:8.3f}ms {r['device_reduce-overhead'] / r['kernels']:10.2f}x "
              f"{r['host_default'] * 1e6:7.0f}us {r['host_reduce-overhead'] * 1e6:7.0f}us "
              f"{r['peak_default'] / 2**20:8.1f}MB {r['peak_reduce-overhead'] / 2**20:8.1f}MB  "
              f"{r['recorded']} ({r['not_recorded']} not)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
