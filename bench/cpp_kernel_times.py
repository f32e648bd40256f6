"""Time each generated C++ kernel of a bench workload under surge, in place.

Compiles the workload with surge's cpp backend, runs it once to record each compiled
graph's arguments, then rebuilds each graph's library with every kernel call inside
its segments bracketed by a clock, and runs the graph's host code on that library:
the kernels see the real buffers, in the real order (caches as warm or cold as in a
real call). Prints each kernel's minimum time over the rounds, largest first.
Compare with torch.compile's kernels by timing the lines of its output code.

    python bench/cpp_kernel_times.py hf_llama_train [--scale full] [--rounds 30] [--threads 1]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import surge  # noqa: E402
from surge.backends.executable import Executable  # noqa: E402
from surge.options import Options, default_cache_dir  # noqa: E402
from surge.runtime.cpp_build import find_toolchain  # noqa: E402
from surge.tools import workloads  # noqa: E402

KERNEL_CALL = re.compile(r"^(    )((?:g\d+_)?cpp_\w+\(.*\));$", re.M)


def recorded_graphs(name: str, scale: str) -> list:
    """(compiled graph, arguments) of each cpp graph one step of the workload calls."""
    calls = []
    call = Executable.call_boxed

    def recording(graph, args):
        calls.append((graph, list(args) + graph.constants))
        return call(graph, args)

    Executable.call_boxed = recording   # the aot runtime calls graphs boxed
    try:
        inst = workloads.build(name, "cpu", scale)
        compiled = surge.compile(inst.fresh_target())
        inst.run(compiled, compiled, inst.make_inputs(0))
    finally:
        Executable.call_boxed = call
    return list({id(g): (g, args) for g, args in calls}.values())


def timed_library(source: str, toolchain, folder: str):
    """``source`` with each kernel call timed into ``surge_kernel_min[k]``; (library, kernel names)."""
    names = []

    def timed(m):
        names.append(m.group(2).split("(")[0])
        k = len(names) - 1
        return (f"{m.group(1)}{{ auto t0 = std::chrono::steady_clock::now(); {m.group(2)}; double us = "
                f"std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count(); "
                f"if (us < surge_kernel_min[{k}]) surge_kernel_min[{k}] = us; }}")

    body = KERNEL_CALL.sub(timed, source)
    head = (f"#include <chrono>\nstatic double surge_kernel_min[{max(1, len(names))}];\n"
            'extern "C" double* surge_kernel_mins() { return surge_kernel_min; }\n')
    path = os.path.join(folder, f"timed_{len(os.listdir(folder))}.cpp")
    with open(path, "w") as f:
        f.write(head + body)
    subprocess.run([toolchain.cxx, *toolchain.flags, path, "-o", path[:-4] + ".so", *toolchain.libs], check=True)
    lib = ctypes.CDLL(path[:-4] + ".so")
    lib.surge_kernel_mins.restype = ctypes.POINTER(ctypes.c_double)
    return lib, names


def main():
    p = argparse.ArgumentParser()
    p.add_argument("workload")
    p.add_argument("--scale", default="full", choices=workloads.SCALES)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    toolchain = find_toolchain(None, default_cache_dir(Options.from_env()))
    folder = tempfile.mkdtemp(prefix="cpp_kernel_times_")
    for k, (graph, inputs) in enumerate(recorded_graphs(args.workload, args.scale)):
        lib, names = timed_library(graph.library_source, toolchain, folder)
        mins = lib.surge_kernel_mins()
        for j in range(len(names)):
            mins[j] = float("inf")
        call = graph.module.make_call(lib)
        with torch.no_grad():
            for _ in range(args.rounds):
                call(list(inputs))
        rows = sorted(((mins[j], names[j]) for j in range(len(names))), reverse=True)
        print(f"graph {k}: {len(names)} kernels, sum of minimums {sum(t for t, _ in rows):.1f} us")
        for t, name in rows:
            print(f"  {t:9.1f} us  {name}")


if __name__ == "__main__":
    main()
