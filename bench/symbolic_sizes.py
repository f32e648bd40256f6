"""One graph compiled for symbolic sizes vs the same graph compiled for each size.

    python bench/symbolic_sizes.py [--target triton|cpp] [--rows 4096] [--cols 1024]

For each workload, the static artifact is compiled for the timed sizes; the symbolic
one is traced once at other sizes with rows and columns symbolic (as a dynamic graph
reaches a backend) and reused. Both are checked against eager, then timed per call
(CUDA events on a GPU, the best of several wall-clock runs on a CPU). The goal of a
dynamic graph: within 10% of the static one at the same size.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch._decomp
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from surge.options import Options  # noqa: E402


def softmax(x, w):
    return torch.softmax(x * w, -1)


def layer_norm_gelu(x, w):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, w))


def chain(x, w):
    for k in range(20):
        x = torch.sin(x) * w if k % 2 else torch.tanh(x) + w
    return x


WORKLOADS = {"softmax": softmax, "layer_norm_gelu": layer_norm_gelu, "pointwise_chain": chain}


def aten(fn, inputs, symbolic: bool):
    """``fn`` as a core ATen graph: static, or with x's rows and columns (w's columns) symbolic."""
    if not symbolic:
        return make_fx(fn, decomposition_table=torch._decomp.core_aten_decompositions())(*inputs), list(inputs)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    fakes = [mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC] * t.ndim)) for t in inputs]
    with mode:
        gm = make_fx(fn, decomposition_table=torch._decomp.core_aten_decompositions())(*fakes)
    return gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]


def compile_for(target, gm, examples):
    options = Options(raise_internal_errors=True, graph_cache=False)
    if target == "triton":
        from surge.backends.triton import compile_aten_graph
        return compile_aten_graph(gm, examples, options)
    from surge.backends.cpp import compile_aten_graph_cpp
    return compile_aten_graph_cpp(gm, examples, options)


def per_call_us(fn, args, cuda: bool) -> float:
    for _ in range(10):
        fn(*args)
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(100):
            fn(*args)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 10.0
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(20):
            fn(*args)
        best = min(best, (time.perf_counter() - t) / 20 * 1e6)
    return best


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="triton" if torch.cuda.is_available() else "cpp")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=1024)
    args = parser.parse_args()
    device = "cuda" if args.target == "triton" else "cpu"
    cuda = device == "cuda"
    print(f"{args.target} on {device}, timed at [{args.rows}, {args.cols}], symbolic traced at [96, 80]")
    for name, fn in WORKLOADS.items():
        x, w = torch.randn(args.rows, args.cols, device=device), torch.randn(args.cols, device=device)
        static = compile_for(args.target, *aten(fn, (x, w), symbolic=False))
        traced = (torch.randn(96, 80, device=device), torch.randn(80, device=device))
        dynamic = compile_for(args.target, *aten(fn, traced, symbolic=True))
        expected = fn(x, w)
        for compiled in (static, dynamic):
            torch.testing.assert_close(compiled(x, w), expected, atol=1e-3, rtol=1e-3)
        s, d = per_call_us(static, (x, w), cuda), per_call_us(dynamic, (x, w), cuda)
        print(f"  {name:16s} static {s:9.1f} us   symbolic {d:9.1f} us   ({d / s:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
