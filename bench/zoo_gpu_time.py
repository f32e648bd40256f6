"""Where a model-zoo workload's GPU time goes: eager against surge, kernel by kernel.

For each workload (``python -m surge bench --suite models --list`` names them), one
process builds it at full size on CUDA, runs eager and surge (torch.compile too with
``--torch-compile``) for a few warm steps, then profiles ``--steps`` steps of each
under torch.profiler and prints, per contender: wall time per step, CUDA kernel time
per step, kernels launched per step, and the kernels that take the most time (a name
that appears many times is one row). surge's graph, break and kernel counters are
printed as well, and surge's results are checked against eager's first.

    python bench/zoo_gpu_time.py --only timm.resnet18.train,timm.resnet50.train [--rows 12]

``--host`` adds, per contender, where the host's time goes: the CUDA runtime calls that
wait for the device or copy to the host (a wall time of host plus device time, not the
larger of the two, points at one) and the Python functions that take the most time in
those steps (cProfile, by own time).
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import time

os.environ.setdefault("SURGE_LOGS", "fallbacks")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import surge  # noqa: E402
from surge.tools import workloads  # noqa: E402


def _step(instance, compiled, target, seed: int):
    return instance.run(compiled, target, instance.make_inputs(seed))


def _wall_ms(instance, compiled, target, steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for k in range(steps):
        _step(instance, compiled, target, 100 + k)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1000 / steps


def _kernels(instance, compiled, target, steps: int) -> tuple[float, int, list]:
    """(CUDA ms per step, kernels per step, [(name, calls per step, ms per step)] by time)."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for k in range(steps):
            _step(instance, compiled, target, 200 + k)
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    total_us = sum(e.self_device_time_total for e in rows)
    launches = sum(e.count for e in rows)
    by_name = collections.Counter()
    counts = collections.Counter()
    for e in rows:
        name = e.key if len(e.key) <= 70 else e.key[:67] + "..."
        by_name[name] += e.self_device_time_total
        counts[name] += e.count
    top = [(n, counts[n] / steps, us / 1000 / steps) for n, us in by_name.most_common()]
    return total_us / 1000 / steps, launches // steps, top


# CUDA runtime calls that make the host wait for the device
_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def _host(instance, compiled, target, steps: int, rows: int) -> list:
    """Lines: the waiting runtime calls per step, then the Python functions by own time."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for k in range(steps):
            _step(instance, compiled, target, 300 + k)
        torch.cuda.synchronize()
    waits = [f"{e.key} {e.count / steps:.1f}x" for e in prof.key_averages()
             if e.key.startswith(_WAITS) and e.count]
    lines = ["    host waits per step: " + (", ".join(waits) or "none")]
    profiler = cProfile.Profile()
    profiler.enable()
    for k in range(steps):
        _step(instance, compiled, target, 400 + k)
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(rows)
    table = text.getvalue().splitlines()
    start = next((k for k, line in enumerate(table) if line.strip().startswith("ncalls")), len(table))
    return lines + ["    " + line for line in table[start:] if line.strip()]


def _check(instance, compiled, target, reference) -> str:
    got = _step(instance, compiled, target, 7)
    want = _step(instance, reference, reference if isinstance(reference, torch.nn.Module) else target, 7)
    rtol, atol = instance.tolerance
    bad = 0
    for a, b in zip(got, want):
        if isinstance(a, torch.Tensor) and not torch.allclose(a.float(), b.float(), rtol=rtol, atol=atol):
            bad += 1
    return "ok" if bad == 0 else f"{bad} of {len(got)} results differ beyond ({rtol}, {atol})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", required=True, help="comma-separated workload names")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rows", type=int, default=12, help="kernels listed per contender")
    p.add_argument("--torch-compile", action="store_true", help="profile torch.compile as well")
    p.add_argument("--host", action="store_true", help="where each contender's host time goes")
    args = p.parse_args()
    for name in [n for n in args.only.split(",") if n]:
        instance = workloads.build(name, "cuda", "full")
        contenders = {"eager": (lambda t: t)}
        contenders["surge"] = surge.compile
        if args.torch_compile:
            contenders["torch.compile"] = torch.compile
        print(f"=== {name}  sizes {instance.sizes}")
        eager_target = instance.fresh_target()
        for label, make in contenders.items():
            target = instance.fresh_target() if label != "eager" else eager_target
            compiled = make(target)
            surge.counters.reset()
            for k in range(3):   # compile and warm up
                _step(instance, compiled, target, k)
            counters = dict(surge.counters) if label == "surge" else {}
            check = _check(instance, compiled, target, eager_target) if label != "eager" else "-"
            wall = _wall_ms(instance, compiled, target, args.steps)
            gpu_ms, launches, top = _kernels(instance, compiled, target, args.steps)
            print(f"--- {label}: wall {wall:.2f} ms/step, CUDA kernels {gpu_ms:.2f} ms/step, "
                  f"{launches} kernels/step, results {check}")
            if counters:
                print("    surge counters (compile + warm-up):",
                      {k: counters.get(k, 0) for k in ("graphs", "graph_breaks", "fallbacks", "kernels")})
            for kernel, calls, ms in top[: args.rows]:
                print(f"    {ms:8.3f} ms  {calls:6.1f}x  {kernel}")
            if args.host:
                print("\n".join(_host(instance, compiled, target, args.steps, args.rows)))


if __name__ == "__main__":
    main()
