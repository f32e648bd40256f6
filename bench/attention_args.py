"""Why an attention call is slower under surge than in eager: the arguments each passes, timed alone.

Both hand attention to the same ATen kernels (``_scaled_dot_product_*`` forward
and backward). This runs one step of a workload under eager and under surge inside
a dispatch mode that keeps the arguments of the first attention calls, prints what
each passed (shape, strides, dtype, storage offset, pointer alignment, flags),
times each call alone on its own arguments, and then times eager's call again with
one tensor argument at a time replaced by surge's: the argument whose swap moves
the time is the one that matters. (torch.compile is not probed: under a Python
dispatch mode its frames do not run the graph it compiled.)

    python bench/attention_args.py [--workload hf_gpt2_train] [--calls 2]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import surge  # noqa: E402
from surge.tools import workloads  # noqa: E402


class AttentionCalls(TorchDispatchMode):
    """Keeps (op, args, kwargs) of the first ``keep`` calls of each attention op."""

    def __init__(self, keep: int):
        super().__init__()
        self.keep, self.calls = keep, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if "attention" in name:
            kept = self.calls.setdefault(name, [])
            if len(kept) < self.keep:
                kept.append((func, args, kwargs))
        return func(*args, **kwargs)


def describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return (f"{str(value.dtype)[6:]}{list(value.shape)} stride {value.stride()} offset "
                f"{value.storage_offset()} ptr%256 {value.data_ptr() % 256}")
    return repr(value)


def time_us(func, args, kwargs, reps: int = 20) -> float:
    for _ in range(3):
        func(*args, **kwargs)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        func(*args, **kwargs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="hf_gpt2_train")
    parser.add_argument("--calls", type=int, default=1, help="calls kept per attention op")
    args = parser.parse_args()
    inst = workloads.build(args.workload, "cuda", "full")
    inputs = inst.make_inputs(0)
    captured = {}
    for label in ("eager", "surge"):
        target = inst.fresh_target()
        compiled = target if label == "eager" else surge.compile(target)
        inst.run(compiled, target, inputs)             # compile outside the mode
        mode = AttentionCalls(args.calls)
        with mode:
            inst.run(compiled, target, inputs)
        torch.cuda.synchronize()
        captured[label] = mode.calls
    for name in captured["eager"]:
        print(f"\n== {name}")
        for label, calls in captured.items():
            for func, a, k in calls.get(name, []):
                print(f"  {label:14s} {time_us(func, a, k):9.1f} us")
                for i, value in enumerate(list(a) + list(k.values())):
                    print(f"      arg {i}: {describe(value)}")
        if not captured["surge"].get(name):
            continue
        func, theirs, kw = captured["eager"][name][0]
        ours = captured["surge"][name][0][1]
        for i, (t, o) in enumerate(zip(theirs, ours)):
            if isinstance(t, torch.Tensor) and isinstance(o, torch.Tensor) and t.shape == o.shape:
                mixed = list(theirs)
                mixed[i] = o
                print(f"  eager's call with surge's arg {i}: {time_us(func, mixed, kw):9.1f} us")


if __name__ == "__main__":
    main()
