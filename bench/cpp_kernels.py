"""C++ kernels on CPU: surge's cpp backend vs eager and torch.compile, in one run, as ratios.

For each workload: time per call (best of 30), speedup over eager, and the
first-call time of a cold compile (empty caches) and of a warm one (a new
compile of the same function with the disk caches filled). Usage:

    python bench/cpp_kernels.py [--rows 4096 --cols 1024] [--skip-inductor] [--workloads a,b] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

# Each contender gets a fresh cache folder, set before torch.compile or surge is imported.
_CACHE_ROOT = tempfile.mkdtemp(prefix="cpp_bench_")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHE_ROOT, "inductor")
os.environ["SURGE_CACHE_DIR"] = os.path.join(_CACHE_ROOT, "surge")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import surge  # noqa: E402
from surge.tools.workloads import pointwise_chain_60  # noqa: E402


def layernorm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, x.shape[-1:], w, b))


def softmax(x):
    return torch.softmax(x, dim=-1)


def rmsnorm(x, w):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return xf.to(x.dtype) * w


def causal_softmax(x):
    # attention scores under a causal mask: half of every row is -inf before the exp
    n = x.shape[-1]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.softmax(x.masked_fill(~mask, float("-inf")), dim=-1)


def seed_block(x, w, b, r):
    return F.gelu(x @ w + b) + r


def add_mul_relu(x, y):
    return torch.relu(x * 2 + y) * y


def workloads(rows: int, cols: int) -> dict:
    r = lambda *s, dtype=torch.float32: torch.randn(*s).to(dtype)  # noqa: E731
    return {
        "pointwise_chain_60": (pointwise_chain_60, lambda: (r(rows // 4, cols),)),
        "add_mul_relu": (add_mul_relu, lambda: (r(rows, cols), r(rows, cols))),
        "layernorm_gelu": (layernorm_gelu, lambda: (r(rows, cols), r(cols), r(cols))),
        "softmax": (softmax, lambda: (r(rows, cols),)),
        "rmsnorm_bf16": (rmsnorm, lambda: (r(rows, cols, dtype=torch.bfloat16), r(cols, dtype=torch.bfloat16))),
        "causal_softmax": (causal_softmax, lambda: (r(rows // cols * 8, cols // 8, cols // 8),)),
        "seed_block": (seed_block, lambda: (r(cols, cols), r(cols, cols), r(cols), r(cols, cols))),
    }


def time_per_call(fn, inputs, repeats: int = 30) -> float:
    """The best of ``repeats`` calls: robust to other work on a shared machine."""
    for _ in range(3):
        fn(*inputs)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*inputs)
        samples.append(time.perf_counter() - start)
    return min(samples)


def first_call(make_compiled, inputs) -> tuple:
    start = time.perf_counter()
    compiled = make_compiled()
    compiled(*inputs)
    return compiled, time.perf_counter() - start


def surge_cpp(fn):
    return surge.compile(fn, backend="cpp")


def run(args) -> list:
    rows = []
    for name, (fn, make_inputs) in workloads(args.rows, args.cols).items():
        if args.workloads and name not in args.workloads:
            continue
        inputs = make_inputs()
        expected = fn(*inputs)
        eager_t = time_per_call(fn, inputs)
        row = {"workload": name, "eager": eager_t}
        surge.reset()
        compiled, row["surge_cold"] = first_call(lambda: surge_cpp(fn), inputs)
        torch.testing.assert_close(compiled(*inputs), expected, atol=2e-2, rtol=2e-2)
        row["surge"] = time_per_call(compiled, inputs)
        surge.reset()
        _, row["surge_warm"] = first_call(lambda: surge_cpp(fn), inputs)
        if not args.skip_inductor:
            torch._dynamo.reset()
            compiled, row["inductor_cold"] = first_call(lambda: torch.compile(fn), inputs)
            row["inductor"] = time_per_call(compiled, inputs)
            torch._dynamo.reset()
            _, row["inductor_warm"] = first_call(lambda: torch.compile(fn), inputs)
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def _ms(t):
    return f"{t * 1e3:.2f}ms" if t is not None else "-"


def format_row(row) -> str:
    e = row["eager"]
    ind = row.get("inductor")
    cells = [row["workload"], _ms(e),
             f"{_ms(ind)} ({e / ind:.2f}x)" if ind else "-",
             f"{_ms(row['surge'])} ({e / row['surge']:.2f}x)",
             f"{row.get('inductor_cold', 0):.2f}s / {row.get('inductor_warm', 0):.2f}s" if ind else "-",
             f"{row['surge_cold']:.2f}s / {row['surge_warm']:.2f}s"]
    return "| " + " | ".join(cells) + " |"


HEADER = ("| workload | eager | torch.compile | surge cpp | torch.compile first call cold / warm "
          "| surge first call cold / warm |\n| --- | --- | --- | --- | --- | --- |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--skip-inductor", action="store_true")
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch/OpenMP threads (1 steadies a busy machine)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, sizes {args.rows}x{args.cols}")
    print(HEADER)
    run(args)


if __name__ == "__main__":
    main()
