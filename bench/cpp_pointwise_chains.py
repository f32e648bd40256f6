"""Long pointwise chains on one CPU thread: surge's cpp backend with and without interleaved
chains (``codegen/cpp/kernel.py``, ``interleaved_x_loop``), next to eager and torch.compile,
in one process, rounds interleaved. Usage:

    python bench/cpp_pointwise_chains.py [--numel 1048576] [--rounds 40] [--skip-inductor]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

_CACHE_ROOT = tempfile.mkdtemp(prefix="cpp_chains_")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHE_ROOT, "inductor")
os.environ["SURGE_CACHE_DIR"] = os.path.join(_CACHE_ROOT, "surge")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import surge  # noqa: E402
from surge.codegen.cpp import kernel as cpp_kernel  # noqa: E402
from surge.tools.workloads import pointwise_chain_60  # noqa: E402


def relu_chain_60(x):
    for _ in range(20):
        x = torch.relu(x * 1.01 + 0.1)
    return x


def _compile_surge(fn, x, interleave: bool):
    """A fresh surge compile of ``fn`` with interleaving on or off (the kernel differs, so
    the disk cache cannot serve one for the other)."""
    saved = cpp_kernel.INTERLEAVE_MIN_OPS
    cpp_kernel.INTERLEAVE_MIN_OPS = saved if interleave else 10**9
    try:
        surge.reset()
        cache_dir = tempfile.mkdtemp(dir=_CACHE_ROOT)   # the other variant's kernels are not served
        compiled = surge.compile(lambda t: fn(t), backend="cpp", options={"cache_dir": cache_dir})
        compiled(x)
    finally:
        cpp_kernel.INTERLEAVE_MIN_OPS = saved
    return compiled


def _time(fn, x, rounds: int) -> list:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(x)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--numel", type=int, default=1 << 20)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--skip-inductor", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(args.numel)
    for name, fn in (("relu_chain_60", relu_chain_60), ("pointwise_chain_60", pointwise_chain_60)):
        contenders = {"eager": fn,
                      "surge (one chain)": _compile_surge(fn, x, interleave=False),
                      "surge (interleaved)": _compile_surge(fn, x, interleave=True)}
        if not args.skip_inductor:
            contenders["torch.compile"] = torch.compile(fn)
        expected = fn(x)
        for label, f in contenders.items():
            torch.testing.assert_close(f(x), expected, rtol=1e-4, atol=1e-4)
        times = {label: [] for label in contenders}
        for _ in range(args.rounds // 10):   # rounds interleaved: load on a shared machine hits all alike
            for label, f in contenders.items():
                times[label].extend(_time(f, x, 10))
        print(f"{name} ({args.numel} floats, 1 thread), p10 / median over {args.rounds} calls:")
        for label, ts in times.items():
            ts.sort()
            print(f"  {label:22s} {ts[len(ts) // 10] * 1e3:8.3f} ms / {ts[len(ts) // 2] * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
