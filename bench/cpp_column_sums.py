"""Training steps with and without column sums in row kernels (cpp backend), against eager and Inductor.

Contenders, interleaved call by call in one process at one thread, minimum over the
rounds (the machine is shared: the minimum is the least disturbed round):

- eager, torch.compile (Inductor);
- surge with the column sums as kernels of their own (``schedule/column_fusion.py``
  switched off for its compile: what the cpp backend did before);
- surge.

``--calls`` also times every call inside one step of Inductor's and surge's compiled
graphs (each generated kernel or segment, each matmul), minimum per call over the
rounds, so that kernels and matmuls can be compared call by call.

    python bench/cpp_column_sums.py [--only mlp_train,hf_gpt2_train] [--rounds 60] [--calls]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import surge  # noqa: E402
from surge.backends.executable import Executable  # noqa: E402
import surge.schedule.column_fusion as column_fusion  # noqa: E402
from surge.tools import workloads  # noqa: E402
from surge.tools.bench import compare  # noqa: E402

DEFAULT = "mlp_train,hf_gpt2_train,hf_llama_train,layernorm_gelu"


class CallTimes:
    """Minimum time of each call (by its position in the step) of the step running now."""

    def __init__(self):
        self.mins: dict = {}
        self.current = None
        self.position = 0

    def start(self, contender: str | None) -> None:
        """Calls from now on belong to ``contender``'s step (None: not recorded)."""
        self.current, self.position = contender, 0
        if contender is not None:
            self.mins.setdefault(contender, collections.defaultdict(lambda: float("inf")))

    def timed(self, label: str, fn):
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            us = (time.perf_counter() - t0) * 1e6
            if self.current is not None:
                key = (self.position, label)
                self.position += 1
                self.mins[self.current][key] = min(self.mins[self.current][key], us)
            return out
        return call

    def report(self) -> None:
        for contender, mins in self.mins.items():
            kinds = collections.Counter()
            for (_, label), us in mins.items():
                kinds["matmul" if label in MATMULS else "kernels"] += us
            print(f"  {contender}: " + ", ".join(f"{k} {v:.0f} us" for k, v in sorted(kinds.items())))
            for (position, label), us in sorted(mins.items()):
                print(f"    {position:3d} {label[:60]:60s} {us:8.1f} us")


MATMULS = {"mm", "addmm", "bmm", "baddbmm", "linear", "aten_mm_default_public", "aten_addmm_default_public",
           "aten_bmm_default_public"}


class ExternProxy:
    """Inductor's ``extern_kernels`` with each call timed."""

    def __init__(self, real, times: CallTimes):
        self.real, self.times = real, times

    def __getattr__(self, name):
        return self.times.timed(name, getattr(self.real, name))


def time_inductor_calls(times: CallTimes) -> None:
    from torch._inductor.codecache import PyCodeCache

    for module in list(PyCodeCache.modules):
        for name in list(vars(module)):
            if name.startswith("cpp_fused"):
                setattr(module, name, times.timed(name, getattr(module, name)))
        if hasattr(module, "extern_kernels") and not isinstance(module.extern_kernels, ExternProxy):
            module.extern_kernels = ExternProxy(module.extern_kernels, times)


def time_surge_calls(graphs: list, cache_dir: str, times: CallTimes) -> None:
    """Rebind each graph's host code with its segments and matmuls timed."""
    from surge.runtime.cpp_build import find_toolchain, load_library

    toolchain = find_toolchain(None, cache_dir)
    for graph in graphs:
        lib, _ = load_library(graph.library_source, toolchain, cache_dir)
        module = graph.module
        bind = module.pointer_function
        module.pointer_function = lambda f, n, bind=bind: times.timed(getattr(f, "__name__", "segment"), bind(f, n))
        for name in vars(module).copy():
            if name in MATMULS:
                setattr(module, name, times.timed(name, getattr(module, name)))
        graph.call = module.make_call(lib)


def surge_contender(inst, column_sums: bool, graphs: list, cache_dir: str):
    """A surge-compiled copy of the target, compiled (on its first call, here) in a cache of its own."""
    target = inst.fresh_target()
    compiled = surge.compile(target, options={"cache_dir": cache_dir})
    fuse = column_fusion.fuse_column_reductions
    if not column_sums:
        column_fusion.fuse_column_reductions = lambda schedule: schedule
    boxed = Executable.call_boxed

    def recording(graph, args):
        if all(graph is not g for g in graphs):
            graphs.append(graph)
        return boxed(graph, args)

    Executable.call_boxed = recording
    try:
        inst.run(compiled, compiled, inst.make_inputs(0))
    finally:
        column_fusion.fuse_column_reductions = fuse
        Executable.call_boxed = boxed
    return compiled


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default=DEFAULT)
    p.add_argument("--scale", default="full", choices=workloads.SCALES)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--calls", action="store_true", help="also time each call inside the compiled steps")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.only.split(","):
        inst = workloads.build(name, "cpu", args.scale)
        inputs = inst.make_inputs(1)
        before, graphs = [], []
        before_dir, cache_dir = tempfile.mkdtemp(prefix="surge_columns_"), tempfile.mkdtemp(prefix="surge_columns_")
        contenders = {
            "eager": inst.fresh_target(),
            "torch.compile": torch.compile(inst.fresh_target()),
            "surge, column kernels": surge_contender(inst, False, before, before_dir),
            "surge": surge_contender(inst, True, graphs, cache_dir),
        }
        steps = {k: (lambda fn=fn: inst.run(fn, fn, inputs)) for k, fn in contenders.items()}
        for step in steps.values():
            for _ in range(3):
                step()
        ref = steps["eager"]()
        for k in ("surge, column kernels", "surge"):
            got = steps[k]()
            ok, _ = compare(got, ref, *inst.tolerance)   # the bench's check: the workload's tolerance
            if not ok:
                print(f"{name}: {k} MISMATCH against eager")
        times = CallTimes()
        if args.calls:
            time_inductor_calls(times)
            time_surge_calls(before, before_dir, times)
            time_surge_calls(graphs, cache_dir, times)
        best = {k: float("inf") for k in steps}
        for _ in range(args.rounds):
            for k, step in steps.items():
                times.start(k if k != "eager" else None)
                t0 = time.perf_counter()
                step()
                best[k] = min(best[k], time.perf_counter() - t0)
        kernels = [sum(len(g.kernel_names) for g in gs) for gs in (before, graphs)]
        line = "  ".join(f"{k} {v * 1e3:.2f}ms" for k, v in best.items())
        print(f"{name}: {line}  surge/tc {best['torch.compile'] / best['surge']:.3f}x "
              f"(column kernels: {best['torch.compile'] / best['surge, column kernels']:.3f}x); "
              f"surge kernels {kernels[0]} -> {kernels[1]}")
        if args.calls:
            times.report()


if __name__ == "__main__":
    main()
