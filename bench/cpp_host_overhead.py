"""Per-call cost of the cpp backend's host code, against eager and torch.compile.

Two measurements per workload, both at one thread (``torch.set_num_threads(1)``),
interleaved call by call in one process, minimum over many rounds (the machine is
shared: the minimum is the least disturbed round):

- end to end: eager, torch.compile and surge on the bench's workload (default: the
  ``--quick`` sizes, where the model workloads are per-call-overhead bound);
- host code alone: each compiled ATen graph of surge's (forward, and backward for
  training) called directly with the inputs it last saw, so the frontend's guards and
  the aot runtime are not in the number; ``--no-kernels`` also swaps every C++
  segment for a no-op, which leaves the Python host code and the ATen extern calls.

    python bench/cpp_host_overhead.py [--only gpt_bundled,llama_bundled] [--scale quick] [--rounds 200]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import surge  # noqa: E402
from surge.backends import pipeline  # noqa: E402
from surge.backends.executable import Executable  # noqa: E402
from surge.tools import workloads  # noqa: E402

DEFAULT = "gpt_bundled,llama_bundled,hf_llama_infer,hf_llama_train"


class GraphRecorder:
    """Keeps every compiled cpp graph and the arguments of its last call."""

    def __init__(self):
        self.graphs = []   # [compiled graph, arguments of its last call, its own call]
        # graphs are made by the driver's pipeline, or loaded from the compiled-graph cache
        for maker in ("compile_graphs", "load_artifact"):
            setattr(pipeline, maker, self.recording(getattr(pipeline, maker)))

    def recording(self, maker):
        def recorded(*a, **k):
            out = maker(*a, **k)
            for graph in (out if isinstance(out, list) else [out]):
                if isinstance(graph, Executable) and graph.target == "cpp":
                    self.wrap(graph)
            return out

        return recorded

    def wrap(self, graph):
        entry = [graph, None]
        call = graph.call

        def remembering(args):
            entry[1] = list(args)
            return call(args)

        graph.call = remembering
        entry.append(call)
        self.graphs.append(entry)


def interleaved_min(fns: dict, rounds: int, inner: int) -> dict:
    """Seconds per call of each function: the minimum over rounds of the mean of ``inner`` calls."""
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / inner)
    return best


def no_op_library():
    """A stand-in library whose every segment is a C function that returns at once
    (extra arguments are ignored by the calling convention)."""
    import ctypes

    address = ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value

    class Library:
        def __getattr__(self, name):
            return ctypes.CFUNCTYPE(None)(address)   # a fresh object: make_call sets its argtypes

    return Library()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default=DEFAULT)
    p.add_argument("--scale", default="quick", choices=workloads.SCALES)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--inner", type=int, default=5)
    p.add_argument("--no-kernels", action="store_true", help="also time the host code with no-op segments")
    p.add_argument("--skip-inductor", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    recorder = GraphRecorder()
    for name in args.only.split(","):
        inst = workloads.build(name, "cpu", args.scale)
        inputs = inst.make_inputs(1)
        contenders = {"eager": inst.fresh_target()}
        if not args.skip_inductor:
            contenders["torch.compile"] = torch.compile(inst.fresh_target())
        target = inst.fresh_target()
        first = len(recorder.graphs)
        contenders["surge"] = surge.compile(target)
        steps = {}
        for cname, fn in contenders.items():
            steps[cname] = (lambda fn=fn: inst.run(fn, fn, inputs))   # compiled modules share parameters
            for _ in range(3):
                steps[cname]()
        ref = steps["eager"]()
        got = steps["surge"]()
        ok = all(torch.allclose(a, b, rtol=1e-3, atol=1e-3) for a, b in
                 zip(ref if isinstance(ref, (list, tuple)) else [ref], got if isinstance(got, (list, tuple)) else [got]))
        mine = recorder.graphs[first:]
        host = {}
        for k, (graph, last, call) in enumerate(mine):
            # a compiled call empties its argument list (inputs dropped after their last use)
            host[f"graph{k}"] = (lambda call=call, last=last: call(list(last)))
            if args.no_kernels:
                bare = graph.module.make_call(no_op_library())
                host[f"graph{k} no-op segments"] = (lambda bare=bare, last=last: bare(list(last)))
        ends = interleaved_min(steps, args.rounds, args.inner)
        with torch.no_grad():
            hosts = interleaved_min(host, args.rounds, args.inner) if host else {}
        line = "  ".join(f"{k} {v * 1e6:7.1f}us" for k, v in ends.items())
        ratio = ""
        if "torch.compile" in ends:
            ratio = f"  surge/tc {(ends['torch.compile'] / ends['surge']):.3f}x"
        print(f"{name:16s} {line}{ratio}  {'ok' if ok else 'MISMATCH'}")
        for k, v in hosts.items():
            print(f"{'':16s} host {k}: {v * 1e6:7.1f}us")


if __name__ == "__main__":
    main()
